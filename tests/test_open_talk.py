"""Open talk: greetings, asides and sign-offs from an open pool, never a held-out word, values intact."""
import random
import re

import pytest
from experiment_script import assert_values_spoken, user_texts

from llmkit.course.open_framing import heldout_words
from llmkit.course.open_talk import HELDOUT_OPTIONS, TALK_ROLES, open_introduction, open_talk, talk_maker
from llmkit.course.phrasing import TRAIN, template
from llmkit.course.skills import make_skills
from llmkit.course.toolgen import VOCABULARY


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z']+", text)}


def test_talk_never_uses_a_heldout_phrasing_word_nor_a_heldout_option():
    rng = random.Random(0)
    pieces = [open_talk(rng, role) for role in TALK_ROLES for _ in range(400)]
    used = set().union(*map(_words, pieces))
    assert {"plain", "gold"} <= HELDOUT_OPTIONS
    assert not used & (heldout_words() | HELDOUT_OPTIONS | set(VOCABULARY["heldout"]))  # nor a held-out tool word
    assert len(set(pieces)) > 0.95 * len(pieces)  # no piece repeats often enough to be learned
    capitals = sum(w[0].isupper() for p in pieces for w in p.split()[1:])
    assert capitals > 200  # capitals inside talk too, so a capital letter does not mark the value


def test_each_role_has_its_shape_and_an_unknown_role_is_refused():
    rng = random.Random(1)
    for _ in range(200):
        assert 3 <= len(open_talk(rng, "before").split()) <= 7
        assert 1 <= len(open_talk(rng, "closer").split()) <= 3
        assert open_talk(rng, "opener")[0].isupper()
    with pytest.raises(ValueError, match="opener"):
        open_talk(rng, "greeting")


def test_talk_replaces_the_grammars_pieces_and_leaves_the_slots():
    grammar_pieces = set(TRAIN.openers) | set(TRAIN.polite) | set(TRAIN.closers)
    rng = random.Random(2)
    talk = talk_maker(random.Random(3))
    for _ in range(300):
        text = template(rng, "weather", "train", noise=False, talk=talk)
        assert sorted(re.findall(r"\{\w+\}", text)) == ["{city}", "{day}"]
        assert not any(piece in text for piece in grammar_pieces if len(piece) > 5)


def test_open_talk_keeps_every_value_in_the_users_words_and_rewrites_about_half_the_talk():
    kinds = ["tool", "weather", "letters", "memory"]
    opened = make_skills(400, split="train", seed=4, kinds=kinds, open_talk=True)
    assert_values_spoken(opened)
    plain_texts = user_texts(make_skills(400, split="train", seed=4, kinds=kinds))
    openers = tuple(o.lower() for o in TRAIN.openers)

    def grammar_openers(texts) -> int:
        return sum(t.lower().startswith(openers) for t in texts)
    # half the requests take open talk, so about half the grammar's openers are left
    assert 0.3 < grammar_openers(user_texts(opened)) / grammar_openers(plain_texts) < 0.7


def test_open_talk_never_reaches_the_split_of_unseen_phrasings():
    kinds, split = ["tool", "weather", "memory"], "unseen_phrasings_and_tools"
    assert [c.messages for c in make_skills(40, split=split, seed=2, kinds=kinds, open_talk=True)] == \
        [c.messages for c in make_skills(40, split=split, seed=2, kinds=kinds)]


def test_an_open_introduction_has_the_name_slot_once_never_first_among_open_words():
    rng = random.Random(3)
    forms = [open_introduction(rng) for _ in range(500)]
    assert all(f.count("{name}") == 1 and not f.startswith("{name}") for f in forms)
    words = [_words(f.replace("{name}", "")) for f in forms]
    assert not set().union(*words) & (heldout_words() | set(VOCABULARY["heldout"]))
    assert all(w == w.lower() for f in forms for w in f.replace("{name}", "").split()[1:])  # only the name is capitalised
    assert len(set(forms)) > 0.95 * len(forms)


def test_memory_open_greets_and_answers_with_the_name_its_open_introduction_holds():
    for c in make_skills(40, split="train", seed=5, kinds=["memory_open"]):
        intro, greeting, answer = c.messages[0]["content"], c.messages[1]["content"], c.messages[-1]["content"]
        name = c.expected.name
        assert name in intro and name in greeting and answer.endswith(f"{name}.")
        assert c.kind == "memory_open"
