"""Open framing: connecting words from an open pool, never a held-out word, values left intact."""
import random
import re

import pytest

from llmkit.course.open_framing import (HELDOUT_SYMBOL_CHARACTERS, OPEN_WORDS, SYMBOLS, heldout_words,
                                        open_argument_styles, open_connector, open_form, open_word)
from llmkit.course.skills import make_skills
from llmkit.course.toolgen import spoken


def test_the_open_pool_is_large_and_shares_no_word_with_the_heldout_pieces():
    assert len(OPEN_WORDS) > 5000
    assert {"being", "using", "as"} <= heldout_words()  # the held-out connectors are among the words left out
    assert not set(OPEN_WORDS) & heldout_words()
    assert {"-", ">", "&", "/"} <= HELDOUT_SYMBOL_CHARACTERS  # from "->", "&", "/"
    assert not [s for s in SYMBOLS if set(s) & HELDOUT_SYMBOL_CHARACTERS]


def test_drawn_words_and_connectors_avoid_what_they_are_told_to():
    rng = random.Random(0)
    avoid = set(OPEN_WORDS[:3000])
    words = [open_word(rng, avoid) for _ in range(2000)]
    assert not set(words) & (avoid | heldout_words())
    connectors = {open_connector(rng) for _ in range(500)}
    assert len(connectors) > 300  # no connector repeats often enough to be learned


def test_styles_and_forms_keep_their_slots():
    rng = random.Random(1)
    for _ in range(200):
        for style in open_argument_styles(rng):
            assert re.findall(r"\{\w+\}", style) in (["{words}", "{value}"], ["{value}", "{words}"])
        assert set(re.findall(r"\{\w+\}", open_form(rng, True))) == {"{subject}", "{args}"}
        assert re.findall(r"\{\w+\}", open_form(rng, False)) == ["{subject}"]


def _first_requests(conversations):
    return [(str(c.messages[0]["content"]), c.expected.calls[0]) for c in conversations if c.expected.calls]


def test_an_openly_framed_request_still_says_every_value_and_parameter_verbatim():
    conversations = make_skills(150, split="train", seed=5, kinds=["tool"], open_framing=True)
    requests = _first_requests(conversations)
    assert len(requests) > 100
    for text, (name, arguments) in requests:
        for parameter, value in arguments.items():
            assert spoken(value) in text, (text, parameter, value)
            if not isinstance(value, bool) and parameter.replace("_", " ") not in text:
                pytest.fail(f"{parameter!r} is not in {text!r}")
    plain = _first_requests(make_skills(150, split="train", seed=5, kinds=["tool"]))
    symbols = [s for s in SYMBOLS if s != "#"]

    def with_symbol(pairs) -> int:
        return sum(any(f" {s} " in text for s in symbols) for text, _ in pairs)
    assert with_symbol(plain) == 0 < with_symbol(requests)


def test_open_framing_never_reaches_the_split_of_unseen_phrasings():
    kinds, split = ["tool", "errands", "multi"], "unseen_phrasings_and_tools"
    assert [c.messages for c in make_skills(40, split=split, seed=2, kinds=kinds, open_framing=True)] == \
        [c.messages for c in make_skills(40, split=split, seed=2, kinds=kinds)]
