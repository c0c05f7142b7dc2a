"""Open forms: words of a training request's form swapped, dropped or added; slots, values and held-out words safe."""
import random
import re
from collections import Counter

import pytest
from experiment_script import assert_values_spoken, user_texts

from llmkit.course.open_forms import open_form_words, value_words
from llmkit.course.open_framing import heldout_words
from llmkit.course.open_talk import HELDOUT_OPTIONS
from llmkit.course.phrasing import SLOT, TRAIN, fill, template
from llmkit.course.recipe_training import finetune_stage
from llmkit.course.skills import make_skills

FORMS = [form for forms in TRAIN.forms.values() for form in forms]


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z']+", SLOT.sub(" ", text))}


def test_an_edited_form_keeps_its_slots_in_order_and_its_end():
    rng = random.Random(0)
    for form in FORMS:
        for _ in range(20):
            edited = open_form_words(rng, form)
            assert SLOT.findall(edited) == SLOT.findall(form), (form, edited)
            assert edited.split()[-1][-1] == form.split()[-1][-1]  # the sentence ends as it did
            assert not edited[0].islower() or form[0].islower()


def test_added_and_swapped_words_are_never_held_out_nor_a_value():
    rng = random.Random(1)
    avoid = {"microscope", "paris"}
    added = set()
    for form in FORMS:
        for _ in range(30):
            added |= _words(open_form_words(rng, form, avoid)) - _words(form)
    assert len(added) > 2000  # the new words come from an open pool, not a list to learn
    assert not added & (heldout_words() | HELDOUT_OPTIONS | avoid)


def test_each_word_is_kept_most_of_the_time_and_each_edit_happens():
    rng = random.Random(2)
    form = "How many times does {letter} appear in {word}?"
    edits = [open_form_words(rng, form) for _ in range(2000)]
    kept = Counter(w for e in edits for w in set(e.split()) & set(form.split()))
    assert all(0.55 < kept[w] / len(edits) < 0.8 for w in ("many", "times", "does", "appear"))
    assert any(len(e.split()) > len(form.split()) for e in edits)  # a word added
    assert any(len(e.split()) < len(form.split()) for e in edits)  # a word dropped
    assert Counter(edits).most_common(1)[0][1] < 0.15 * len(edits)  # no edited form is common enough to learn


def test_value_words_are_the_lower_case_words_of_the_values():
    assert value_words({"city": "New York", "day": "tomorrow", "n": 3}) == {"new", "york", "tomorrow"}


def test_the_grammar_rewords_only_a_form_it_chose():
    shout = str.upper
    assert template(random.Random(3), "weather", "train", noise=False, form="Rain in {city} {day}?",
                    reword=shout).count("Rain in {city} {day}?") == 1
    forms = {template(random.Random(s), "weather", "train", noise=False, reword=shout) for s in range(50)}
    assert any("WILL IT RAIN" in f or "WEATHER" in f or "FORECAST" in f for f in forms)


def _holds_a_training_form(text: str, values: dict) -> bool:
    forms = TRAIN.forms["weather"]
    return any(fill(form, values).lower().rstrip("?.!") in text.lower() for form in forms)


def test_open_forms_keep_every_value_and_edit_about_half_the_requests():
    kinds = ["tool", "weather", "letters", "arithmetic", "search", "memory"]
    opened = make_skills(600, split="train", seed=4, kinds=kinds, open_forms=True)
    assert_values_spoken(opened)

    def intact(open_forms: bool) -> float:
        conversations = make_skills(400, split="train", seed=6, kinds=["weather"], open_forms=open_forms)
        return sum(_holds_a_training_form(t, c.expected.calls[0][1])
                   for c, t in zip(conversations, user_texts(conversations))) / len(conversations)
    plain, opened_share = intact(False), intact(True)
    assert plain > 0.9  # only a typo breaks a form of the grammar
    assert 0.35 < opened_share / plain < 0.65  # half the requests are edited, and an edit rarely leaves all words


def test_open_forms_never_reach_a_held_out_split_nor_the_default_data():
    kinds, split = ["tool", "weather", "letters", "memory"], "unseen_phrasings_and_tools"
    assert [c.messages for c in make_skills(40, split=split, seed=2, kinds=kinds, open_forms=True)] == \
        [c.messages for c in make_skills(40, split=split, seed=2, kinds=kinds)]
    assert [c.messages for c in make_skills(40, split="train", seed=2, kinds=kinds, open_forms=False)] == \
        [c.messages for c in make_skills(40, split="train", seed=2, kinds=kinds)]


def test_a_dozen_forms_become_thousands():
    rng = random.Random(5)
    edited = {open_form_words(rng, rng.choice(TRAIN.forms["letters"])) for _ in range(5000)}
    assert len(TRAIN.forms["letters"]) == 12 and len(edited) > 3000


def test_a_dpo_stage_cannot_take_open_forms():
    with pytest.raises(ValueError, match="open_forms"):
        finetune_stage("dpo", object(), resume=False, stop_after=None, progress=False, open_forms=True)
