"""The own_tool kind: a learner-style version of a course tool, with held-out pools of its own."""
from __future__ import annotations

import json
import random
import re

import pytest

from llmkit.chat.template import tool_line
from llmkit.chat.tools import run_tool_call, validate_arguments
from llmkit.course.own_tools import (CHAR_PARAMS, DAY_PARAMS, DESCRIPTIONS, FAMILY, NAMES, NUMBER_PARAMS,
                                     OWN_TOOL_JOBS, PLACE_PARAMS, RESULT_KEYS, TEXT_PARAMS, VERBAL_FORMS,
                                     make_own_tool)
from llmkit.course.skills import COURSE_SUBJECTS, COURSE_TOOLS, make_skills
from llmkit.course.toolgen import value_at

PARAMS = [PLACE_PARAMS, DAY_PARAMS, TEXT_PARAMS, CHAR_PARAMS, NUMBER_PARAMS]
POOLS = [*NAMES.values(), *PARAMS, *RESULT_KEYS.values(), *VERBAL_FORMS.values()]
LEARNER_TRIAL = {"forecast", "place", "add", "a", "b"}  # data/experiments/learner_trial: a test of its own


def _flat(items) -> set[str]:
    return {x for item in items for x in (item if isinstance(item, tuple) else (item,))}


@pytest.mark.parametrize("pool", POOLS)
def test_every_pool_has_two_disjoint_halves(pool):
    assert pool.train and pool.heldout
    assert not _flat(pool.train) & _flat(pool.heldout)


@pytest.mark.parametrize("job", OWN_TOOL_JOBS)
def test_descriptions_have_two_disjoint_halves(job):
    pool = DESCRIPTIONS[job]
    assert pool.train and pool.heldout
    assert not {d for d, _ in pool.train} & {d for d, _ in pool.heldout}


def test_held_out_descriptions_share_no_three_words_in_a_row_with_training_ones():
    def trigrams(text):
        words = re.findall(r"[a-z]+", text.lower())
        return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}
    train = set().union(*(trigrams(d) for pool in DESCRIPTIONS.values() for d, _ in pool.train))
    for pool in DESCRIPTIONS.values():
        for description, _ in pool.heldout:
            assert not trigrams(description) & train, description


def test_the_learner_trials_tool_and_parameter_names_are_in_no_pool():
    every = set().union(*(_flat(pool.train) | _flat(pool.heldout) for pool in [*NAMES.values(), *PARAMS]))
    assert not LEARNER_TRIAL & every


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("job", OWN_TOOL_JOBS)
def test_a_tool_takes_its_words_from_its_split_and_the_thinking_word_is_on_its_line(job, split):
    other = "heldout" if split == "train" else "train"
    for seed in range(30):
        own = make_own_tool(random.Random(seed), job, split)
        assert own.tool.name in getattr(NAMES[job], split) and own.tool.name not in getattr(NAMES[job], other)
        assert own.note.lower() in tool_line(own.tool.definition()).lower()
        params = list(own.tool.input_schema["properties"])
        assert params[:len(own.params)] == list(own.params)
        trained = set().union(*(_flat(p.train) for p in PARAMS))
        assert (set(params) <= trained) == (split == "train")


def test_each_job_computes_what_its_course_tool_would():
    rng = random.Random(3)
    for _ in range(40):
        own = make_own_tool(rng, "add", "train")
        x, y = own.params
        assert own.tool(**{x: 17, y: 25}) == 42
    own = make_own_tool(random.Random(1), "subtract", "heldout")
    assert own.tool(**dict(zip(own.params, (50, 8)))) == 42
    own = make_own_tool(random.Random(1), "multiply", "train")
    assert own.tool(**dict(zip(own.params, (6, 7)))) == 42
    own = make_own_tool(random.Random(1), "letters", "train")
    assert own.tool(**dict(zip(own.params, ("Strawberry", "R")))) == COURSE_TOOLS["letters"]("Strawberry", "R")
    for seed in range(20):
        own = make_own_tool(random.Random(seed), "weather", "heldout")
        result = own.tool(**{own.params[0]: "Pune", **({own.params[1]: "tomorrow"} if len(own.params) > 1 else {})})
        real = COURSE_TOOLS["weather"]("Pune", "tomorrow" if len(own.params) > 1 else "today")
        assert set(result) == set(own.keys.values())
        assert result[own.keys["high"]] == real["high_c"] and result[own.keys["sky"]] == real["condition"]


@pytest.mark.parametrize("kind", ["own_tool", "own_tool_open"])
@pytest.mark.parametrize("split", ["seen", "unseen_phrasings_and_tools"])
def test_conversations_call_the_tool_with_the_users_values_and_answer_from_its_result(split, kind):
    from llmkit.course.own_tools import JOB_WORDS

    specs = make_skills(120, split=split, seed=2, kinds=[kind])
    refusals = [s for s in specs if not s.expected.calls]
    assert 0.1 < len(refusals) / len(specs) < 0.3  # one in five offers a tool for another job
    for spec in specs:
        offered = {t.name: t for t in spec.tools}
        if not spec.expected.calls:
            assert spec.expected.no_invention
            own = [t for t in spec.tools if t.function.__module__ == make_own_tool.__module__]
            assert len(own) == 1
            words = set(own[0].name.split("_"))
            jobs = ([job for job in OWN_TOOL_JOBS if own[0].name in NAMES[job].train + NAMES[job].heldout]
                    if kind == "own_tool" else
                    [job for job in OWN_TOOL_JOBS if words & set(JOB_WORDS[job].train + JOB_WORDS[job].heldout)])
            asked = next(family for family, subject in COURSE_SUBJECTS.items() if subject == spec.expected.facts["subject"])
            assert jobs and all(FAMILY[job] != asked for job in jobs)  # the own tool offered does another job
            continue
        (name, tool_input), = spec.expected.calls
        tool = offered[name]
        assert not set(offered) & {t.name for t in COURSE_TOOLS.values()}  # no course tool to fall back on
        validate_arguments(tool, tool_input)
        request = spec.messages[0]["content"]
        for value in tool_input.values():
            if isinstance(value, str) and value not in ("today", "tomorrow"):
                assert value.lower() in request.lower() or len(value) == 1, (value, request)
            elif isinstance(value, int):
                assert str(value) in request
        result = run_tool_call([tool], name, tool_input, tool_use_id="t")["content"]
        answer = spec.messages[-1]["content"][-1]["text"]
        shown = value_at(json.loads(result), spec.expected.answer_paths[0]) if spec.expected.answer_paths[0] \
            else json.loads(result)
        assert str(shown) in answer and spec.expected.answer_values == (str(shown),)


def test_training_conversations_never_show_a_held_out_name_and_held_out_ones_never_a_training_name():
    train = make_skills(200, split="train", seed=5, kinds=["own_tool"])
    unseen = make_skills(200, split="unseen_phrasings_and_tools", seed=5, kinds=["own_tool"])
    heldout_names = set().union(*(pool.heldout for pool in NAMES.values()))
    train_names = set().union(*(pool.train for pool in NAMES.values()))
    assert not {t.name for s in train for t in s.tools} & heldout_names
    assert not {t.name for s in unseen for t in s.tools} & train_names
    assert {t.name for s in unseen for t in s.tools} & heldout_names


def test_the_kind_is_seeded():
    a = make_skills(10, split="seen", seed=9, kinds=["own_tool"])
    b = make_skills(10, split="seen", seed=9, kinds=["own_tool"])
    assert [s.messages for s in a] == [s.messages for s in b]
    assert a[0].messages != make_skills(1, split="seen", seed=10, kinds=["own_tool"])[0].messages


def test_open_tools_say_their_job_in_one_word_and_draw_the_rest_openly():
    from llmkit.course.own_tools import JOB_WORDS, NEVER_OPEN

    fixed = set().union(*(_flat(pool.train) | _flat(pool.heldout) for pool in [*NAMES.values(), *PARAMS]))
    for split, other in (("train", "heldout"), ("heldout", "train")):
        names, params = set(), set()
        for seed in range(200):
            job = OWN_TOOL_JOBS[seed % len(OWN_TOOL_JOBS)]
            own = make_own_tool(random.Random(seed), job, split, open_words=True)
            words = own.tool.name.split("_")
            assert own.note in words and own.note in getattr(JOB_WORDS[job], split)
            assert not set(words) & _flat(getattr(JOB_WORDS[job], other))
            assert own.note.lower() in tool_line(own.tool.definition()).lower()
            names.add(own.tool.name)
            params |= set(own.tool.input_schema["properties"])
        assert not (names | params) & NEVER_OPEN  # the learner trial's names (a job word may be part of a name)
        if split == "train":  # the fixed pools' held-out halves stay unseen too
            assert not (names | params) & set().union(*(_flat(p.heldout) for p in [*NAMES.values(), *PARAMS]))
        assert len(names) > 120 and len(params - fixed) > 100  # open: mostly new every time




def test_open_conversations_are_the_same_in_every_process():
    """Nothing drawn depends on Python's per-process string hashing (a set's order), in these kinds
    or any other, so a recipe that trains on them reruns on the same conversations."""
    import os
    import subprocess
    import sys

    script = ("import hashlib, json; from llmkit.course.skills import KINDS, make_skills; "
              "print(hashlib.sha256(json.dumps([c.messages for c in make_skills(6 * len(KINDS), split='train', seed=1, "
              "kinds=KINDS)], default=str).encode()).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(digests) == 1
