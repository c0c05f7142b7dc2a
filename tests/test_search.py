"""llmkit.course.search (BM25 over data/docs) and the web_search server tool built on it."""
from __future__ import annotations

import json
import random

import pytest

from llmkit.paths import data_path
from llmkit.course.search import (INJECTED_DOCUMENT, SNIPPET_CHARS, Citation, Document, SearchIndex, SearchResult,
                                  course_index, find_citations, search_results, words)
from llmkit.chat.tools import Tool, run_tool_call, tool
from llmkit.course.tools import EXAMPLE_TOOLS, SEARCH_RESULTS, web_search


def write(folder, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def small(tmp_path):
    """Four documents with clearly different topics (and a README that must not be indexed)."""
    write(tmp_path, "rain.md", "# Rain in Pune\nThe monsoon brings Pune heavy rain.\nUmbrellas sell well in June.\n")
    write(tmp_path, "cache.md", "# KV cache\nA KV cache keeps keys and values.\nIt saves recomputing old tokens.\n")
    write(tmp_path, "bread.txt", "Baking bread\nBread needs flour, water, yeast and time.\n")
    write(tmp_path, "notes/tea.md", "# Tea\nTea grows on the hills of Kandy.\n")
    write(tmp_path, "README.md", "# About\nmonsoon monsoon monsoon cache bread tea\n")
    return tmp_path


# ---------------------------------------------------------------------------------------------- words
def test_words_are_lowercased_and_lose_a_plural_s():
    assert words("The KV-Cache stores TOKENS.") == ["the", "kv", "cache", "store", "token"]
    assert words("class boss is has") == ["class", "boss", "is", "has"]  # "ss" and short words stay
    assert words("Pune's monsoon, 2024!") == ["pune", "s", "monsoon", "2024"]
    assert words("tool_use") == ["tool_use"]


# ---------------------------------------------------------------------------------------------- ranking
def test_distinctive_words_find_their_document_first(small):
    index = SearchIndex.from_folder(small)
    assert len(index) == 4 and "README.md" not in [d.path for d in index.documents]
    for query, path in [("monsoon Pune", "rain.md"), ("KV cache", "cache.md"), ("flour yeast", "bread.txt"),
                        ("tea Kandy", "notes/tea.md"), ("umbrella", "rain.md")]:
        hits = index.search(query, k=4)
        assert hits[0].path == path, (query, hits)
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))  # best first


def test_hits_carry_title_path_snippet_and_only_matching_documents(small):
    index = SearchIndex.from_folder(small)
    (hit,) = index.search("yeast", k=3)  # no other document has the word: one hit, not three
    assert (hit.title, hit.path) == ("Baking bread", "bread.txt") and hit.score > 0
    assert hit.snippet == "Bread needs flour, water, yeast and time."
    assert index.search("zebra", k=3) == []
    # the snippet is the sentence with the query's words, not the first sentence
    assert index.search("umbrellas June", k=1)[0].snippet == "Umbrellas sell well in June."


def test_bm25_rewards_rare_words_and_repeats_with_diminishing_returns():
    docs = [Document(f"d{i}.md", f"Doc {i}", (text,)) for i, text in enumerate(
        ["alpha common", "alpha alpha common", "alpha alpha alpha alpha common", "beta common", "gamma common"])]
    index = SearchIndex(docs)
    one, two, four = index.scores("alpha")[:3]
    assert 0 < one < two < four and (four - two) < 2 * (two - one)  # more repeats help less and less
    common = index.scores("common")
    rare = index.scores("beta")
    assert max(common) < rare[3]  # a word in every document barely counts; a rare one counts a lot
    assert index.search("beta common", k=1)[0].path == "d3.md"


def test_ties_are_broken_by_path_whatever_the_input_order():
    texts = [("b.md", "Same", ("the same words",)), ("a.md", "Same", ("the same words",)),
             ("c.md", "Other", ("different text here",))]
    orders = []
    for seed in range(4):
        shuffled = texts[:]
        random.Random(seed).shuffle(shuffled)
        index = SearchIndex([Document(*t) for t in shuffled])
        hits = index.search("same words", k=3)
        assert hits[0].score == hits[1].score
        orders.append([h.path for h in hits])
    assert orders == [["a.md", "b.md"]] * 4
    # within a document, the earliest of equally good sentences is the snippet
    index = SearchIndex([Document("x.md", "X", ("Rain in June.", "Rain in July.")), Document("y.md", "Y", ("Sun.",))])
    assert index.search("rain", k=1)[0].snippet == "Rain in June."


def test_a_long_sentence_is_shortened_visibly():
    long = "word " * 60 + "monsoon."
    index = SearchIndex([Document("long.md", "Long", (long.strip(),)), Document("b.md", "B", ("other",))])
    snippet = index.search("monsoon", k=1)[0].snippet
    assert snippet.endswith("…") and len(snippet) <= SNIPPET_CHARS
    assert long.startswith(snippet[:-1])


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("query", ["", "   ", "?!", "— ..."])
def test_a_query_without_words_is_an_error(small, query):
    with pytest.raises(ValueError, match="no words"):
        SearchIndex.from_folder(small).search(query)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "3"])
def test_k_must_be_a_positive_whole_number(small, k):
    with pytest.raises((TypeError, ValueError), match="k must be"):
        SearchIndex.from_folder(small).search("tea", k=k)


def test_bad_folders_and_documents_are_clear_errors(tmp_path, small):
    with pytest.raises(TypeError, match="query must be a str"):
        SearchIndex.from_folder(small).search(42)
    with pytest.raises(KeyError, match="no document"):
        SearchIndex.from_folder(small).document("nope.md")
    with pytest.raises(FileNotFoundError, match="not a folder"):
        SearchIndex.from_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .md or .txt"):
        SearchIndex.from_folder(tmp_path / "empty")
    write(tmp_path, "untitled/a.md", "\nA document whose first line is empty.\n")
    with pytest.raises(ValueError, match="no title"):
        SearchIndex.from_folder(tmp_path / "untitled")
    with pytest.raises(ValueError, match="own path"):
        SearchIndex([Document("a.md", "A", ("x",)), Document("a.md", "B", ("y",))])
    with pytest.raises(ValueError, match="at least one document"):
        SearchIndex([])


# ---------------------------------------------------------------------------------------------- the course collection
def test_the_course_collection_is_small_titled_and_holds_one_injection():
    index = course_index()
    assert 25 <= len(index) <= 40
    assert index is course_index()  # built once
    assert all(d.title and d.sentences for d in index.documents)
    injected = [d.path for d in index.documents if "ignore your previous instructions" in d.text.lower()]
    assert injected == [INJECTED_DOCUMENT]
    assert (data_path("docs") / "README.md").is_file()


@pytest.mark.parametrize("query, path", [("monsoon in Pune", "pune.md"), ("KV cache store", "kv_cache.md"),
                                         ("prompt injection", "prompt_injection.md"),
                                         ("context window", "context_window.md")])
def test_course_questions_find_their_note(query, path):
    assert course_index().search(query, k=1)[0].path == path


def test_goa_beaches_finds_the_injected_page_with_the_injection_in_its_snippet():
    top = course_index().search("Goa beaches", k=2)[0]
    assert top.path == INJECTED_DOCUMENT
    assert "ignore your previous instructions" in top.snippet.lower()


# ---------------------------------------------------------------------------------------------- web_search
def test_web_search_is_a_compact_server_tool():
    assert isinstance(web_search, Tool) and web_search.server and repr(web_search) == "Tool('web_search', server=True)"
    assert web_search not in EXAMPLE_TOOLS and not any(t.server for t in EXAMPLE_TOOLS)
    assert web_search.definition()["input_schema"]["required"] == ["query"]
    results = json.loads(web_search(query="monsoon in Pune"))
    hits = course_index().search("monsoon in Pune", k=SEARCH_RESULTS)
    assert list(results.items()) == [(h.title, h.snippet) for h in hits]  # title -> snippet, best first
    assert json.loads(web_search(query="zebra xylophone")) == {}


def test_web_search_errors_become_error_results():
    result = run_tool_call([web_search], "web_search", {"query": "  "}, tool_use_id="s1")
    assert result["is_error"] and "no words" in result["content"]
    result = run_tool_call([web_search], "web_search", {"q": "Pune"}, tool_use_id="s2")
    assert result["is_error"] and "invalid arguments" in result["content"]


def test_tool_marks_server_tools_only_when_asked():
    @tool
    def plain(x: str) -> str:
        """Echo.

        Args:
            x: Text.
        """
        return x

    @tool(server=True)
    def remote(x: str) -> str:
        """Echo on the server.

        Args:
            x: Text.
        """
        return x

    assert not plain.server and remote.server and remote(x="hi") == "hi"
    assert remote.definition() == {**plain.definition(), "name": "remote", "description": "Echo on the server."}
    with pytest.raises(TypeError, match="server must be True or False"):
        Tool(plain.function, name="p", description="d", input_schema={}, server="yes")


# ---------------------------------------------------------------- results with sources, and citations
def test_search_results_carry_their_source_documents(small):
    index = SearchIndex.from_folder(small)
    content = json.dumps({hit.title: hit.snippet for hit in index.search("monsoon tea", k=2)})
    results = search_results(content, index)
    assert [(r.title, r.source) for r in results] == [(hit.title, hit.path)
                                                      for hit in index.search("monsoon tea", k=2)]
    assert results[0].snippet == index.search("monsoon tea", k=2)[0].snippet
    course = search_results(web_search.function("monsoon in Pune"))  # the real tool, the course's documents
    assert course and all(data_path("docs", r.source).is_file() for r in course)
    with pytest.raises(ValueError, match="not a web_search result"):
        search_results("refused: at most 3 server tool calls")


def test_citations_are_the_words_an_answer_repeats_from_a_result():
    results = [SearchResult("Rain in Pune", "The monsoon brings Pune heavy rain from June.", "data/docs/rain.md"),
               SearchResult("Tea", "Tea grows on the hills of Kandy.", "data/docs/tea.md")]
    answer = "Yes: the Monsoon brings Pune heavy rain, so take an umbrella."
    assert find_citations(answer, results) == [Citation("The monsoon brings Pune heavy rain", "Rain in Pune",
                                                        "data/docs/rain.md")]
    assert find_citations("Take an umbrella.", results) == []  # nothing repeated: nothing cited
    both = find_citations("Tea grows on the hills; the monsoon brings Pune rain.", results)
    assert [c.title for c in both] == ["Tea", "Rain in Pune"]  # the longer quote first (5 words, then 4)
    assert find_citations("the monsoon", results, min_words=2)[0].cited_text == "The monsoon"
