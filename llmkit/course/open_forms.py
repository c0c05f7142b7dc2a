"""Request forms whose own words are not fixed: a share of training forms have words swapped, added or dropped.

The training grammar has 6 to 15 forms per course intent and 32 for a generated tool
(``phrasing_pools.TRAIN``). Held out one factor at a time (data/experiments/held_out_factors/),
new wording costs the chat model more exact arguments than new tool words do: it has tied where a
value sits to the exact words of the forms it saw ("Spell out microscope and total its m's." ->
``word="its"``). Open talk around the request (``open_talk``) halved that cost; this goes one step
further, into the form itself.

For a share of training requests, each literal word of the chosen form is, independently, kept,
swapped for an open word (corpus or made-up, ``open_framing.open_word``) or dropped, and now and
then an open word is added after it: the random edits of "easy data augmentation" (Wei and Zou,
2019) without synonyms, which a small model has no way to check. The slots (``{city}``,
``{letter}'s``) and their order are never touched, so the value to copy is where the request puts
it, and most of the form's words stay, so the request still says what it asks for; but no run of
form words repeats often enough to be the thing learned.

Measured at the end of ``sft_skills`` (data/experiments/open_forms/), it did not teach the copy:
exact arguments on unseen phrasings and tools stayed where open talk had left them. What it
changed is how often an unfamiliar request is refused. Nor is it the held-out forms' rare words
("tally", "crunch"): swapped for words the base read often, the same requests did no better.
What a new wording changes that matters is the form itself, which this leaves in place.

Held out by construction: ``open_word`` never draws a word of any held-out phrasing piece.
"""
from __future__ import annotations

import random
import re

from llmkit.course.open_framing import open_word
from llmkit.course.open_talk import HELDOUT_OPTIONS

__all__ = ["OPEN_FORMS_RATE", "SWAP_RATE", "DROP_RATE", "ADD_RATE", "open_form_words", "value_words"]

OPEN_FORMS_RATE = 0.5  # the share of training requests whose form is edited
SWAP_RATE = 0.25  # each literal word: swapped for an open word ...
DROP_RATE = 0.1  # ... or dropped (a word with punctuation is never dropped, so the sentence keeps its end)
ADD_RATE = 0.1  # and, after any token but the last, an open word added

_WORD = re.compile(r"^(\W*)([A-Za-z][A-Za-z']*)(\W*)$")  # leading punctuation, the word, trailing punctuation


def value_words(values: dict) -> set[str]:
    """The lower-case words of a request's values: an added word must never be one of them, or the
    request would hold its value twice."""
    return {w for v in values.values() for w in re.findall(r"[a-z']+", str(v).lower())}


def open_form_words(rng: random.Random, form: str, avoid: set[str] = frozenset()) -> str:
    """``form`` with its literal words edited: "How many {letter}'s are in {word}?" may come back as
    "How vexed {letter}'s are plimbo in {word}?" or "Many {letter}'s are in {word}?". A token that
    holds a slot is kept as it is; so is a token that is not a plain word ("--", "(", "{args}.")."""
    avoid = set(avoid) | HELDOUT_OPTIONS
    tokens: list[str] = []
    words = form.split()
    for i, token in enumerate(words):
        match = None if "{" in token else _WORD.match(token)
        if match is None:
            tokens.append(token)
        else:
            lead, word, trail = match.groups()
            roll = rng.random()
            if roll < SWAP_RATE:
                swapped = open_word(rng, avoid)
                tokens.append(lead + (swapped.capitalize() if word[0].isupper() else swapped) + trail)
            elif roll >= SWAP_RATE + DROP_RATE or lead or trail:
                tokens.append(token)
        if i < len(words) - 1 and rng.random() < ADD_RATE:  # never after the sentence's end
            tokens.append(open_word(rng, avoid))
    if tokens and tokens[0][0].islower() and form[0].isupper():
        tokens[0] = tokens[0][0].upper() + tokens[0][1:]  # the first word dropped: the next one starts the sentence
    return " ".join(tokens)
