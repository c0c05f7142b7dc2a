"""open_enums: enum and boolean parameters named, and enum options drawn, like every other tool word."""
import random

from llmkit.course.skills import make_skills
from llmkit.course.toolgen import BOOLEAN_WORDS, TOOL_WORDS, VOCABULARY, enum_options, make_tool, pool_words, spoken


def _enum_and_boolean_params(split="train", open_enums=True, n=300):
    rng = random.Random(5)
    tools = [make_tool(rng, split, invent_every_word=True, open_enums=open_enums) for _ in range(n)]
    params = [p for t in tools for p in t.params]
    return [p for p in params if p.type == "enum"], [p for p in params if p.type == "boolean"]


def test_without_it_enums_keep_the_fixed_pools():
    enums, booleans = _enum_and_boolean_params(open_enums=False)
    fixed = {tuple(options) for options in TOOL_WORDS["train"]["enum"].values()}
    assert enums and all(p.options in fixed for p in enums)
    words = TOOL_WORDS["train"]
    named = {b for b in words["boolean"]} | {f"{m}_{b}" for m in words["modifiers"] for b in words["boolean"]}
    assert booleans and {p.name for p in booleans} <= named


def test_with_it_options_and_names_are_drawn_afresh():
    enums, booleans = _enum_and_boolean_params()
    options = {o for p in enums for o in p.options}
    assert len(options) > 150  # no option repeats often enough to be written from memory
    assert all(len(set(p.options)) == len(p.options) >= 2 for p in enums)
    assert not options & BOOLEAN_WORDS
    assert len({p.name for p in enums}) > 40 and len({p.name for p in booleans}) > 40


def test_training_options_hold_no_heldout_word():
    options = {o for seed in range(2000) for o in enum_options(random.Random(seed), "train")}
    fixed = {o for opts in TOOL_WORDS["train"]["enum"].values() for o in opts}  # "fast" is also a corpus word
    assert not (options - fixed) & (pool_words("heldout") | set(VOCABULARY["heldout"]))
    assert not options & {o for opts in TOOL_WORDS["heldout"]["enum"].values() for o in opts}


def test_the_user_still_says_each_enum_value_verbatim():
    for c in make_skills(120, split="train", seed=6, kinds=["tool"], open_enums=True, open_framing=True):
        name, arguments = c.expected.calls[0]
        schema = next(t for t in c.tools if t.name == name).definition()["input_schema"]["properties"]
        for parameter, value in arguments.items():
            if "enum" in schema[parameter]:
                assert value in schema[parameter]["enum"] and spoken(value) in c.messages[0]["content"]
