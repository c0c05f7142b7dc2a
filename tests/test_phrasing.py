"""The phrasing grammars: thousands of surface forms per intent, values untouched, held-out pieces disjoint."""
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.course.phrasing import (GRAMMARS, HELDOUT, INTENTS, SLOT, TRAIN, count_forms, fill, fragments, phrase,
                                    phrasing_split, template, typo)

MANY_FORMS = {"multi": 400, "which_tools": 600, "greet": 800, "thanks": 800, "abilities": 800, "author": 600}


@pytest.mark.parametrize("intent", INTENTS)
def test_each_intent_has_thousands_of_training_forms(intent):
    assert count_forms(intent, "train", samples=8000) >= MANY_FORMS.get(intent, 2000)


@pytest.mark.parametrize("intent", INTENTS)
def test_each_intent_has_many_heldout_forms(intent):
    assert count_forms(intent, "heldout", samples=8000) >= MANY_FORMS.get(intent, 2000) // 2


def _pieces(p):
    out = set()
    for forms in [*p.forms.values(), *p.later_forms.values(), *p.wider_forms.values()]:
        out |= {f.lower() for f in forms}
    for table in (p.before, p.after):
        for items in table.values():
            out |= {s.lower() for s in items}
    return out | {s.lower() for s in p.openers + p.polite + p.closers + p.arg_styles + p.chatter
                + p.wider_arg_styles + p.wider_arg_joiners}


def test_no_piece_is_shared_between_train_and_heldout():
    assert not _pieces(TRAIN) & _pieces(HELDOUT)


def _trigrams(text: str) -> set[tuple[str, ...]]:
    found = set()
    for run in SLOT.split(text.lower()):
        words = re.sub(r"[^a-z' ]", " ", run).split()
        found |= {tuple(words[i:i + 3]) for i in range(len(words) - 2)}
    return found


TRAIN_TRIGRAMS = set().union(*(_trigrams(f) for table in (TRAIN.forms, TRAIN.later_forms, TRAIN.wider_forms) for forms in table.values()
                                for f in forms))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9), intent=st.sampled_from(INTENTS))
def test_heldout_forms_hold_no_three_word_run_of_a_training_form(seed, intent):
    text = template(random.Random(seed), intent, "heldout", noise=False)
    assert not _trigrams(text) & TRAIN_TRIGRAMS, text


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9), city=st.text("ABCdefgh -'", min_size=1, max_size=12))
def test_noise_never_touches_a_value(seed, city):
    text = phrase(random.Random(seed), "weather", {"city": city, "day": "tomorrow"}, "train")
    assert city in text and "tomorrow" in text


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_chatter_talks_around_the_request_with_the_words_it_is_given(split):
    rng = random.Random(3)
    texts = [fill(template(rng, "weather", split, chatter=lambda: "plimbo"), {"city": "Oslo", "day": "today"})
             for _ in range(400)]
    with_talk = [t for t in texts if "plimbo" in t.lower()]
    assert 0.2 < len(with_talk) / len(texts) < 0.5  # CHATTER_RATE, 0.35
    assert all("Oslo" in t and "today" in t and "{" not in t for t in texts)
    frames = {f.split("{")[0].lower() for f in (TRAIN if split == "train" else HELDOUT).chatter}
    assert all(any(frame in t.lower() for frame in frames) for t in with_talk)


def test_fill_refuses_a_missing_value():
    with pytest.raises(KeyError, match="city"):
        fill("Rain in {city}?", {"day": "today"})


def test_typo_swaps_two_letters_outside_slots():
    text = typo(random.Random(0), "Tell me about {city} please")
    assert "{city}" in text and text != "Tell me about {city} please"
    assert sorted(text) == sorted("Tell me about {city} please")


def test_splits_map_to_phrasings():
    assert phrasing_split("seen") == phrasing_split("unseen_values") == "train"
    assert phrasing_split("unseen_phrasings_and_tools") == "heldout"
    with pytest.raises(ValueError, match="unknown split"):
        phrasing_split("test")


def test_every_form_of_an_intent_uses_the_same_slots():
    for (intent, split), g in GRAMMARS.items():
        slots = {frozenset(SLOT.findall(f)) for f in g.forms}
        assert len(slots) == 1, (intent, split, slots)


def test_fragments_are_lowercase_word_runs():
    assert fragments("Will it rain in {city} {day}?") == ["will it rain in"]


WIDER_MARKS = ("people call me", "everyone calls me", "let me introduce myself", "oh, and", "another thing:",
               "one more:", "produce the", "i'm after the", "what would the", ", that's the", "equal to", "should be")


def _wider_forms_seen(conversations) -> int:
    """How many first user messages hold a phrase that only the wider pieces have."""
    return sum(any(m in str(c.messages[0]["content"]).lower() for m in WIDER_MARKS) for c in conversations)


def test_the_marks_are_wider_pieces_only():
    from llmkit.course.phrasing_pools import TRAIN

    wider = " | ".join([f for forms in TRAIN.wider_forms.values() for f in forms] + TRAIN.wider_arg_styles).lower()
    first = " | ".join([f for table in (TRAIN.forms, TRAIN.later_forms) for forms in table.values() for f in forms]
                       + TRAIN.arg_styles).lower()
    assert all(m in wider and m not in first for m in WIDER_MARKS)


def test_wider_phrasings_only_where_asked_and_never_in_the_heldout_split():
    from llmkit.course.skills import make_skills

    kinds = ["tool", "memory", "multi"]
    plain = make_skills(120, split="train", seed=4, kinds=kinds)
    wider = make_skills(120, split="train", seed=4, kinds=kinds, wider_phrasings=True)
    assert _wider_forms_seen(plain) == 0 < _wider_forms_seen(wider)
    assert [c.messages for c in make_skills(60, split="unseen_phrasings_and_tools", seed=4, kinds=kinds)] == \
        [c.messages for c in make_skills(60, split="unseen_phrasings_and_tools", seed=4, kinds=kinds,
                                         wider_phrasings=True)]  # the held-out grammar has no wider pieces
