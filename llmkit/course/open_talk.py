"""Talk drawn from an open pool: greetings, asides and sign-offs a model cannot learn by heart.

Trained with ten openers, four politeness words and five sign-offs, a small model learns those
words as "not the value" and treats every other word as a candidate. Given a held-out request
such as "Be a dear: dig up notes on Doha", it copies "dear"; after "Much obliged." it starts a
city with "M". Here, for a share of the training requests, each piece of talk around the request
(opener, politeness, context before or after, sign-off) is made afresh from corpus and made-up
words, capitalised at random, so that the only steady mark of the value is where the request puts
it. The request's own words (its form) are the grammar's. Measured at the end of ``sft_skills``
(data/experiments/open_talk/), it lifts exact arguments on unseen phrasings and tools more than
any earlier data change, and mostly not by the misses it was aimed at: the model reads the
request's own words better.

Held out by construction: no word of a held-out phrasing piece is drawn (``open_framing.open_word``),
nor an option of a held-out enum ("gold", "plain"), which a held-out request may ask the model to copy.
"""
from __future__ import annotations

import random
from collections.abc import Callable

from llmkit.course.open_framing import open_word
from llmkit.course.toolgen import TOOL_WORDS

__all__ = ["OPEN_TALK_RATE", "TALK_ROLES", "HELDOUT_OPTIONS", "talk_word", "open_talk", "talk_maker", "open_introduction"]

OPEN_TALK_RATE = 0.5  # the share of training requests whose talk is drawn from the open pool
TALK_ROLES = ("opener", "before", "polite", "after", "closer")
HELDOUT_OPTIONS = frozenset(o for options in TOOL_WORDS["heldout"]["enum"].values() for o in options)
"""Values a held-out request may ask for: never talk, or training would teach the model to skip them."""

# role -> (fewest words, most words, endings)
_SHAPES = {
    "opener": (1, 2, ("!", ",", ".", ":", "?")),
    "polite": (1, 3, (":", ",", "")),
    "before": (3, 7, (".", "!", "...")),
    "after": (3, 7, (".", "!", "...", "?")),
    "closer": (1, 3, (".", "!", "?!", "")),
}


def talk_word(rng: random.Random, capital_rate: float) -> str:
    """One word of talk: an open word, capitalised with probability ``capital_rate``."""
    word = open_word(rng, HELDOUT_OPTIONS)
    return word.capitalize() if rng.random() < capital_rate else word


def open_talk(rng: random.Random, role: str) -> str:
    """A piece of talk for ``role`` ("opener", "before", "polite", "after" or "closer"): "Vexed
    quoth!", "Plimbo the wax tarried Harrow.", "Much Skeeb." Its first word is capitalised; any
    other word is, now and then (a sign-off's more often), so a capital letter says nothing."""
    if role not in _SHAPES:
        raise ValueError(f"unknown talk role {role!r}; choose one of {TALK_ROLES}")
    fewest, most, endings = _SHAPES[role]
    capital_rate = 0.5 if role in ("opener", "closer") else 0.2
    words = [talk_word(rng, capital_rate) for _ in range(rng.randint(fewest, most))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice(endings)


def talk_maker(rng: random.Random) -> Callable[[str], str]:
    """``open_talk`` bound to ``rng``: what ``phrasing.template`` takes as ``talk``."""
    return lambda role: open_talk(rng, role)


def open_introduction(rng: random.Random) -> str:
    """An introduction whose words say nothing ("Plimbo vexed {name} quoth."): two to five lower-case
    open words with the ``{name}`` slot among them, never first. Trained on these (``memory_open``),
    a model cannot learn which words introduce a name; what marks it is that it is capitalised and
    that the reply greets it, which is also true of an introduction worded in a way it never saw."""
    words = [talk_word(rng, 0.0) for _ in range(rng.randint(2, 5))]
    words.insert(rng.randint(1, len(words)), "{name}")
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", "!", "...", ""))
