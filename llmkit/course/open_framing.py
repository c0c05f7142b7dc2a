"""Framing drawn from an open pool: requests whose connecting words carry no signal.

Trained on five ways to tie a value to its parameter ("rate = 49", "rate set to 49", ...), a small
model may learn those connectors rather than the parameter's name, and miss the value when a user
writes "rate being 49" or "using 49 for the rate". Here, for a share of the training requests, the
words between a parameter's name and its value, and the verb before a tool's subject, are drawn
afresh from thousands of corpus words, made-up words and symbols. No connector repeats often
enough to be learned, so the marks left are the ones a user's sentence always has: the parameter's
and the subject's own words from the tool definition. Measured at the end of ``sft_skills``
(data/experiments/open_framing/), it helps the model choose an unseen tool more than it helps it
copy an unseen value.

Held out by construction: no word of any held-out phrasing piece is ever drawn (``OPEN_WORDS``),
nor a symbol that shares a character with a held-out connector (``SYMBOLS``).
"""
from __future__ import annotations

import random
import re

from llmkit.course.phrasing_pools import HELDOUT, Pieces
from llmkit.course.toolgen import VOCABULARY
from llmkit.course.values import invented_word

__all__ = ["OPEN_RATE", "OPEN_WORDS", "SYMBOLS", "HELDOUT_SYMBOL_CHARACTERS", "open_word", "open_connector",
           "open_argument_styles", "open_joiners", "open_form", "heldout_words", "tool_words"]

OPEN_RATE = 0.5  # the share of generated-tool requests framed from the open pool
SYMBOLS = ("~", "::", "|", ":=", "==", "=~", "+=", "#", "@")  # none shares a character with a held-out one
VALUE_WORDS = {"yes", "no", "true", "false"}  # a user's boolean values: never a connector


def heldout_words(pieces: Pieces = HELDOUT) -> set[str]:
    """Every lower-case word written anywhere in ``pieces`` (forms, context, styles, joiners, chatter)."""
    texts: list[str] = []
    for value in vars(pieces).values():
        items = value.values() if isinstance(value, dict) else [value] if isinstance(value, str) else value
        for item in items:
            texts.extend(item if isinstance(item, list) else [item])
    return {w for text in texts for w in re.findall(r"[a-z']+", text.lower())}


HELDOUT_WORDS = frozenset(heldout_words())
OPEN_WORDS = sorted(set(VOCABULARY["train"]) - HELDOUT_WORDS - VALUE_WORDS)
"""Corpus words of the training split that no held-out phrasing piece uses."""

HELDOUT_SYMBOL_CHARACTERS = frozenset("".join(re.findall(r"[^\w\s{}'.,?!]+", " ".join(
    s for group in (HELDOUT.arg_styles, HELDOUT.arg_joiners) for s in group))))
"""The characters of the held-out connectors and joiners ("->", "&", "/"): "=>" or ">" would be
near enough to "->" to teach it."""
if HELDOUT_SYMBOL_CHARACTERS & set("".join(SYMBOLS)):
    raise AssertionError(f"open symbols share {HELDOUT_SYMBOL_CHARACTERS & set(''.join(SYMBOLS))} with held-out ones")


def tool_words(tool) -> set[str]:
    """The words a generated tool's subject and parameters are named with: never a connector."""
    return set(tool.subject.split()) | {w for p in tool.params for w in p.words.split()}


def open_word(rng: random.Random, avoid: set[str] = frozenset()) -> str:
    """A corpus word (four times in five) or a made-up one, never one of ``avoid`` nor a held-out
    word (made-up syllables can spell one, like "per")."""
    while True:
        word = rng.choice(OPEN_WORDS) if rng.random() < 0.8 else invented_word(rng, "train", (1, 2))
        if word not in avoid and word not in VALUE_WORDS and word not in HELDOUT_WORDS:
            return word


def open_connector(rng: random.Random, avoid: set[str] = frozenset()) -> str:
    """What stands between a parameter and its value: one or two open words, or a symbol."""
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(SYMBOLS)
    if roll < 0.75:
        return open_word(rng, avoid)
    return f"{open_word(rng, avoid)} {open_word(rng, avoid)}"


def open_argument_styles(rng: random.Random, avoid: set[str] = frozenset(), n: int = 3) -> list[str]:
    """``n`` argument styles for ``toolgen.say_arguments``, each with a fresh connector: the name
    before the value ("{words} zorp {value}") two times in three, else after it."""
    styles = []
    for _ in range(n):
        if rng.random() < 2 / 3:
            styles.append(f"{{words}} {open_connector(rng, avoid)} {{value}}")
        elif rng.random() < 0.5:
            styles.append(f"{{value}} {open_connector(rng, avoid)} {{words}}")
        else:
            styles.append(f"{open_word(rng, avoid)} {{value}} {open_word(rng, avoid)} the {{words}}")
    return styles


def open_joiners(rng: random.Random) -> list[str]:
    """How the arguments are strung together: a comma, a semicolon or a symbol between spaces."""
    return [rng.choice([", ", "; ", f" {rng.choice(SYMBOLS)} "])]


def open_form(rng: random.Random, with_arguments: bool, avoid: set[str] = frozenset()) -> str:
    """A request whose verb and linking words are open: "Blorp the {subject} thy {args}." or,
    arguments first, "{args} -- wend the {subject}?"."""
    verb = " ".join(open_word(rng, avoid) for _ in range(rng.choice((1, 1, 2)))).capitalize()
    end = rng.choice(".?!")
    if not with_arguments:
        return f"{verb} the {{subject}}{end}"
    link = open_connector(rng, avoid)
    if rng.random() < 0.7:
        return f"{verb} the {{subject}} {link} {{args}}{end}"
    return f"{{args}} {link} {verb.lower()} the {{subject}}{end}"
