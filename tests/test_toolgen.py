"""Generated tools: valid definitions, real deterministic results, disjoint held-out word pools."""
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.chat.template import tool_line
from llmkit.chat.tools import run_tool_call, validate_arguments
from llmkit.course.toolgen import (TOOL_WORDS, TYPES, draw_arguments, make_tool, pool_words, say_arguments, spoken)
from llmkit.course.phrasing_pools import TRAIN
from llmkit.course.values import value_split


def test_train_and_heldout_pools_share_no_word():
    assert not pool_words("train") & pool_words("heldout")
    for key in ("descriptions", "keys"):
        assert not set(TOOL_WORDS["train"][key]) & set(TOOL_WORDS["heldout"][key])


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9), split=st.sampled_from(["train", "heldout"]))
def test_a_generated_tool_runs_and_its_arguments_validate(seed, split):
    rng = random.Random(seed)
    tool = make_tool(rng, split)
    arguments = draw_arguments(rng, tool, split)
    real = tool.as_tool()
    validate_arguments(real, arguments)
    result = run_tool_call([real], tool.name, arguments, tool_use_id="t")
    assert not result["is_error"]
    assert json.loads(result["content"]) == tool.result(arguments)  # a pure function of the arguments
    assert tool_line(tool.definition()).startswith(tool.name + "(")
    assert len(tool.params) <= 3 and tool.name == tool.name.lower() and " " not in tool.name


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_users_words_carry_every_argument_value(seed):
    rng = random.Random(seed)
    tool = make_tool(rng, "train")
    arguments = draw_arguments(rng, tool, "train")
    said = say_arguments(rng, tool, arguments, TRAIN.arg_styles, TRAIN.arg_joiners)
    for p in tool.params:
        assert spoken(arguments[p.name]) in said and p.words in said


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_string_and_number_values_come_from_the_asked_split(seed):
    rng = random.Random(seed)
    tool = make_tool(rng, "train", params=3)
    arguments = draw_arguments(rng, tool, "heldout")
    for p in tool.params:
        if p.type in ("string", "integer", "number"):
            assert value_split(arguments[p.name]) == "heldout"


def test_all_types_appear_and_names_vary():
    rng = random.Random(0)
    tools = [make_tool(rng, "train") for _ in range(400)]
    assert {p.type for t in tools for p in t.params} == set(TYPES)
    assert len({t.name for t in tools}) > 300
    assert {len(t.params) for t in tools} == {0, 1, 2, 3}
    assert any(t.nest for t in tools) and any(not t.nest for t in tools)


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="tool split"):
        make_tool(random.Random(0), "test")


def test_skill_tools_invent_measures_and_parameter_names_and_corpus_tools_do_not():
    import random

    from llmkit.course.toolgen import TOOL_WORDS, make_tool

    words = TOOL_WORDS["train"]
    known_params = ({n for names in words["string"].values() for n in names} | set(words["integer"]) |
                    set(words["number"]) | set(words["boolean"]) | set(words["enum"]))
    known_params |= {f"{m}_{p}" for m in words["modifiers"] for p in set(known_params)}

    def invented_shares(**options):
        rng = random.Random(0)
        tools = [make_tool(rng, "train", **options) for _ in range(400)]
        measures = sum(t.subject.split()[-1] not in words["measures"] for t in tools) / len(tools)
        params = [p.name for t in tools for p in t.params]
        return measures, sum(p not in known_params for p in params) / len(params)

    assert invented_shares() == (0.0, 0.0)  # the corpus's documents: only the domain is ever made up
    measures, params = invented_shares(invent_every_word=True)
    assert 0.57 < measures < 0.77 and 0.3 < params < 0.5  # two thirds; strings and numbers only, so fewer params


def test_tool_vocabulary_is_the_corpus_words_split_by_the_value_hash_without_pool_words():
    from llmkit.course.tool_vocabulary import WORDS, corpus_words
    from llmkit.course.toolgen import VOCABULARY
    from llmkit.course.values import value_split
    from llmkit.paths import data_path

    assert WORDS == corpus_words(data_path("corpus", "train.txt").read_text(encoding="utf-8"))
    assert not set(VOCABULARY["train"]) & set(VOCABULARY["heldout"])
    every_pool_word = pool_words("train") | pool_words("heldout")
    for split in ("train", "heldout"):
        assert len(VOCABULARY[split]) > 500 and not set(VOCABULARY[split]) & every_pool_word
        assert all(value_split(w) == split for w in VOCABULARY[split])


def test_corpus_words_are_the_most_frequent_with_ties_in_alphabetical_order():
    from llmkit.course.tool_vocabulary import corpus_words

    assert corpus_words("bb aa bb cc Dd dd x1x dddd aaaa aaaa bbbb eeeeeeeeeee", 2) == ["aaaa", "bbbb"]
    assert corpus_words("zzzz yyyy zzzz", 5) == ["zzzz", "yyyy"]


def test_skill_tools_name_themselves_with_words_of_their_own_split_third_from_each_source():
    from llmkit.course.toolgen import VOCABULARY

    for split, other in (("train", "heldout"), ("heldout", "train")):
        rng = random.Random(1)
        tools = [make_tool(rng, split, invent_every_word=True) for _ in range(600)]
        verbs = [t.name.split("_")[0] for t in tools if len(t.name.split("_")) == 3]
        assert not {w for t in tools for w in t.name.split("_")} & (set(VOCABULARY[other]) | pool_words(other))
        from_pool = sum(v in TOOL_WORDS[split]["verbs"] for v in verbs) / len(verbs)
        from_corpus = sum(v in VOCABULARY[split] for v in verbs) / len(verbs)
        assert 0.25 < from_pool < 0.42 and 0.25 < from_corpus < 0.42
