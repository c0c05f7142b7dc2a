"""Search over a small local document collection: BM25, the classic ranking behind search engines.

The course's ``web_search`` tool (``llmkit.course.tools.web_search``) stands in for the web with the
handwritten notes in ``data/docs/``: no network, and the same query always gets the same
results. A hosted model's web search works the same way in outline: the query is split into
words, documents are ranked by how well they match, and the model reads only a title and a short
snippet of each top hit, as tokens in its context.

**Words.** ``words(text)`` lowercases (``casefold``) and keeps runs of letters, digits and ``_``;
a final "s" is dropped from words longer than three letters (not from "ss"), so "token" finds
"tokens" and "store" finds "stores". That is a crude stemmer, but it is applied to documents and
queries alike, so it only has to be consistent, not correct ("paris" becomes "pari" on both sides).

**BM25.** A document scores, for each query word ``w`` it contains::

    idf(w) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average_length))

``tf`` is how often ``w`` occurs in the document. ``idf(w) = ln(1 + (N - n + 0.5) / (n + 0.5))``,
with ``n`` of the ``N`` documents containing ``w``, is large for rare words and near zero for words
in every document, so "the" and "is" barely count and no stop-word list is needed. ``k1`` makes
repeats count less and less (the tenth "Pune" adds little), and ``b`` stops long documents from
winning just by having more words.

**Snippets.** A hit's snippet is the document's sentence (one per line, or split at ". ") whose
distinct query words have the largest summed idf; the earliest wins a tie. A sentence longer than
``snippet_chars`` ends at a word boundary with "…", so the cut is visible.

Ties between documents are broken by path, so the ranking never depends on file-system order.
"""
from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from llmkit.checks import check_int
from llmkit.paths import data_path

K1 = 1.5
B = 0.75
SNIPPET_CHARS = 140
SUFFIXES = (".md", ".txt")
INJECTED_DOCUMENT = "injected_goa_beach_guide.md"
"""The document in ``data/docs`` that carries a prompt injection (found by the query "Goa beaches")."""


def words(text: str) -> list[str]:
    """The words BM25 compares: lowercased, letters/digits/_ only, a plural "s" dropped (see the module doc)."""
    return [_stem(word) for word in re.findall(r"\w+", text.casefold())]


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@dataclass(frozen=True)
class Document:
    """One document: ``path`` relative to the collection's folder, its ``title`` (the first line,
    without a leading ``#``) and ``sentences`` (the rest, one per line or sentence)."""

    path: str
    title: str
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join((self.title, *self.sentences))


@dataclass(frozen=True)
class SearchHit:
    """One result: the document's ``title`` and ``path`` (relative name), the best-matching sentence
    as ``snippet``, and its BM25 ``score`` (higher is better; only the order means anything)."""

    title: str
    path: str
    snippet: str
    score: float


class SearchIndex:
    """A BM25 index over a list of ``Document``; build one with ``SearchIndex.from_folder()``."""

    def __init__(self, documents: list[Document], *, k1: float = K1, b: float = B,
                 snippet_chars: int = SNIPPET_CHARS):
        if not documents:
            raise ValueError("a search index needs at least one document")
        paths = [document.path for document in documents]
        repeated = sorted({path for path in paths if paths.count(path) > 1})
        if repeated:
            raise ValueError(f"two documents have the path(s) {repeated}; give each document its own path")
        if not k1 >= 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        check_int("snippet_chars", snippet_chars, minimum=20)
        self.documents = sorted(documents, key=lambda document: document.path)
        self.k1, self.b, self.snippet_chars = k1, b, snippet_chars
        self._counts = [Counter(words(document.text)) for document in self.documents]
        self._lengths = [sum(counts.values()) for counts in self._counts]
        self._average_length = sum(self._lengths) / len(self._lengths)
        containing = Counter(word for counts in self._counts for word in counts)
        n = len(self.documents)
        self._idf = {word: math.log(1 + (n - count + 0.5) / (count + 0.5)) for word, count in containing.items()}

    @classmethod
    def from_folder(cls, path: str | Path | None = None, **options) -> SearchIndex:
        """Index every ``.md`` and ``.txt`` file in ``path`` (default: the course's ``data/docs``),
        except ``README.md``. Each file's first line is its title."""
        folder = data_path("docs") if path is None else Path(path)
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} is not a folder of documents; pass the folder that holds the "
                                    f".md/.txt files, or None for the course's data/docs")
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                       and p.name.lower() != "readme.md")
        if not files:
            raise ValueError(f"{folder} holds no .md or .txt documents to index")
        return cls([read_document(file, folder) for file in files], **options)

    def __len__(self) -> int:
        return len(self.documents)

    def document(self, path: str) -> Document:
        """The document with this relative ``path`` (e.g. ``INJECTED_DOCUMENT``)."""
        for document in self.documents:
            if document.path == path:
                return document
        raise KeyError(f"no document {path!r} in the index; its documents are {[d.path for d in self.documents]}")

    def scores(self, query: str) -> list[float]:
        """The BM25 score of every document (in ``self.documents`` order) for ``query``."""
        terms = set(_query_words(query))
        return [self._score(terms, counts, length) for counts, length in zip(self._counts, self._lengths)]

    def search(self, query: str, k: int = 3) -> list[SearchHit]:
        """The ``k`` best documents for ``query``, best first; documents that share no word with the
        query are left out, so there may be fewer than ``k``. Equal scores are ordered by path."""
        check_int("k", k, minimum=1)
        terms = set(_query_words(query))
        ranked = sorted(((self._score(terms, counts, length), document) for document, counts, length
                         in zip(self.documents, self._counts, self._lengths)),
                        key=lambda pair: (-pair[0], pair[1].path))
        return [SearchHit(document.title, document.path, self.snippet(document, query), score)
                for score, document in ranked[:k] if score > 0]

    def snippet(self, document: Document, query: str) -> str:
        """The sentence of ``document`` that best matches ``query`` (see the module docstring)."""
        terms = set(_query_words(query))
        if not document.sentences:
            return ""
        weights = [sum(self._idf.get(word, 0.0) for word in terms & set(words(sentence)))
                   for sentence in document.sentences]
        best = document.sentences[max(range(len(weights)), key=lambda i: (weights[i], -i))]
        return _shorten(best, self.snippet_chars)

    def _score(self, terms: set[str], counts: Counter, length: int) -> float:
        norm = self.k1 * (1 - self.b + self.b * length / self._average_length)
        return sum(self._idf[word] * counts[word] * (self.k1 + 1) / (counts[word] + norm)
                   for word in terms if word in counts)

    def __repr__(self) -> str:
        return f"SearchIndex({len(self)} documents)"


@functools.cache
def course_index() -> SearchIndex:
    """The index over the course's ``data/docs`` (what ``web_search`` searches), built once and kept."""
    return SearchIndex.from_folder()


def read_document(file: Path, folder: Path) -> Document:
    """Read one file: the first line is the title, every later non-empty line holds sentences."""
    lines = file.read_text(encoding="utf-8").splitlines()
    name = file.relative_to(folder).as_posix()
    if not lines or not lines[0].strip().lstrip("#").strip():
        raise ValueError(f"{file} has no title: its first line must be the title, e.g. '# Pune, India'")
    title = lines[0].strip().lstrip("#").strip()
    sentences = tuple(sentence for line in lines[1:] for sentence in re.split(r"(?<=[.!?])\s+", line.strip())
                      if sentence)
    return Document(name, title, sentences)


def _query_words(query: str) -> list[str]:
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    found = words(query)
    if not found:
        raise ValueError(f"the query {query!r} has no words to search for; ask with a few words, "
                         f"such as 'monsoon in Pune'")
    return found


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


# --- what an app shows of a search: results with their sources, and the citations in the answer --------

@dataclass(frozen=True)
class SearchResult:
    """One ``web_search`` result as an app shows it: ``title``, ``snippet`` and ``source``, the
    document it came from (its path in the collection, e.g. "pune.md" in ``data/docs``: the course's
    stand-in for a URL)."""

    title: str
    snippet: str
    source: str


@dataclass(frozen=True)
class Citation:
    """A passage of an answer traced back to a result: ``cited_text`` (the snippet's words the answer
    repeats), and the result's ``title`` and ``source``."""

    cited_text: str
    title: str
    source: str


def search_results(content: str, index: SearchIndex | None = None) -> list[SearchResult]:
    """The results of one ``web_search`` call, from the JSON it returned (title -> snippet, best
    first), each with its source document looked up by title in ``index`` (default: the course's)."""
    import json

    try:
        hits = json.loads(content)
    except ValueError:
        raise ValueError(f"not a web_search result (JSON from title to snippet): {content[:80]!r}; an error "
                         f"result has no results to show") from None
    if not isinstance(hits, dict):
        raise ValueError(f"a web_search result is a JSON object from title to snippet, got {content[:80]!r}")
    index = course_index() if index is None else index
    return [SearchResult(title, snippet, _source(title, index)) for title, snippet in hits.items()]


def _source(title: str, index: SearchIndex) -> str:
    """The document a result title names: ``web_search`` writes "Title (path)" when two hits share a title."""
    for document in index.documents:
        if title in (document.title, f"{document.title} ({document.path})"):
            return document.path
    return "(unknown source)"


def find_citations(answer: str, results: list[SearchResult], *, min_words: int = 3) -> list[Citation]:
    """The results an answer quotes, best first: for each result, the longest run of at least
    ``min_words`` consecutive words (compared case-insensitively) the answer shares with its snippet.

    A hosted API's model writes its citations as it answers; the course model was not trained to, so
    the app finds them afterwards by matching the answer against what it read. An answer that
    paraphrases cites nothing here: the check is for repeated words, not for meaning."""
    check_int("min_words", min_words, minimum=1)
    answer_words = [word.casefold() for word in re.findall(r"\w+", answer)]
    citations = []
    for result in results:
        spans = [(m.start(), m.end(), m.group().casefold()) for m in re.finditer(r"\w+", result.snippet)]
        first, length = _longest_shared_run([word for _, _, word in spans], answer_words)
        if length >= min_words:
            cited = result.snippet[spans[first][0]:spans[first + length - 1][1]]
            citations.append((length, Citation(cited, result.title, result.source)))
    return [citation for _, citation in sorted(citations, key=lambda pair: -pair[0])]


def _longest_shared_run(snippet: list[str], answer: list[str]) -> tuple[int, int]:
    """(start in ``snippet``, length) of the longest run of words that also appears in ``answer``."""
    best = (0, 0)
    previous = [0] * (len(answer) + 1)  # run lengths ending at the previous snippet word
    for i, word in enumerate(snippet):
        current = [0] * (len(answer) + 1)
        for j, other in enumerate(answer):
            if word == other:
                current[j + 1] = previous[j] + 1
                if current[j + 1] > best[1]:
                    best = (i - current[j + 1] + 1, current[j + 1])
        previous = current
    return best
