"""How a user says what they want: small grammars that compose thousands of surface forms per intent.

A model fine-tuned on five fixed sentences per task learns those sentences, not the task: the
first question a learner types in their own words falls outside what it has seen. So each intent
(weather, counting letters, arithmetic, search, a generated tool, introducing yourself, asking
your name back, chit-chat) is a *grammar*: an opener, some context before, a politeness word, one
of several question forms (different word orders), some context after, a sign-off; then casing,
punctuation and now and then a typo vary the surface. The product of the choices is thousands of
distinct forms per intent (``count_forms`` measures it).

Held out by construction: ``HELDOUT`` is a second set of openers, forms and context written
separately from ``TRAIN``, never used in training, so an evaluation on it asks whether the model
understood the request rather than recognised the sentence.

*Chatter* (opt-in) is talk around the request whose nouns are as new as a tool's words ("My
plimbo broke again."): trained only on requests whose sole unfamiliar words are the ones to copy,
a model learns "copy the new word" instead of reading where the request puts it, and a held-out
phrasing full of unfamiliar talk breaks it.

Noise never touches a value: a template is varied while its ``{slots}`` are still placeholders
and only then filled, so the city or word the tool call must copy is exactly what the user wrote.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from llmkit.course.phrasing_pools import HELDOUT, TRAIN, Pieces

__all__ = ["GRAMMARS", "HELDOUT", "TRAIN", "Pieces", "grammar", "phrase", "template", "count_forms",
           "fill", "INTENTS", "CHITCHAT", "CHATTER_RATE", "phrasing_split", "fragments", "vary", "typo"]

INTENTS = ("weather", "letters", "arithmetic", "search", "tool", "tool_bare", "memory_intro", "memory_question",
           "greet", "thanks", "abilities", "author", "multi", "which_tools")
CHITCHAT = ("greet", "thanks", "abilities", "author")  # no tool needed, whatever is offered
PHRASING_SPLITS = ("train", "heldout")
TYPO_RATE = 0.05
CHATTER_RATE = 0.35
SLOT = re.compile(r"\{[a-z_]+\}")


@dataclass(frozen=True)
class Grammar:
    """One intent's pieces in one split: ``forms`` hold the slots; the rest is surrounding talk."""

    intent: str
    forms: tuple[str, ...]
    before: tuple[str, ...]
    after: tuple[str, ...]
    openers: tuple[str, ...]
    polite: tuple[str, ...]
    closers: tuple[str, ...]
    chatter: tuple[str, ...] = ()
    later_forms: tuple[str, ...] = ()
    wider_forms: tuple[str, ...] = ()


def phrasing_split(split: str) -> str:
    """Which phrasings a conversation split uses: the unseen-phrasings split reads HELDOUT, the rest TRAIN."""
    if split in ("train", "seen", "unseen_values"):
        return "train"
    if split in ("heldout", "unseen_phrasings_and_tools"):
        return "heldout"
    raise ValueError(f"unknown split {split!r}; use train, seen, unseen_values or unseen_phrasings_and_tools")


def grammar(intent: str, split: str = "train") -> Grammar:
    """The grammar of ``intent`` in ``split`` ("train"/"heldout" or a conversation split)."""
    if intent not in INTENTS:
        raise ValueError(f"unknown intent {intent!r}; choose one of {INTENTS}")
    pieces: Pieces = TRAIN if phrasing_split(split) == "train" else HELDOUT
    return Grammar(intent, tuple(pieces.forms[intent]), tuple(pieces.before.get(intent, ())),
                   tuple(pieces.after.get(intent, ())), tuple(pieces.openers), tuple(pieces.polite),
                   tuple(pieces.closers), tuple(pieces.chatter), tuple(pieces.later_forms.get(intent, ())),
                   tuple(pieces.wider_forms.get(intent, ())))


GRAMMARS = {(intent, split): grammar(intent, split) for intent in INTENTS for split in PHRASING_SPLITS}


def template(rng: random.Random, intent: str, split: str = "train", *, noise: bool = True,
             chatter: Callable[[], str] | None = None, later_forms: bool = False, wider: bool = False,
             form: str | None = None, talk: Callable[[str], str] | None = None,
             reword: Callable[[str], str] | None = None) -> str:
    """One surface form of ``intent`` with its ``{slots}`` still unfilled.

    A form is always there; everything else is optional. A request in two sentences comes from
    context before or after it. ``noise`` varies casing and end punctuation and adds a typo now
    and then, outside the slots. ``chatter``, a function that returns a word, adds a sentence of
    talk before or after the request now and then, its nouns drawn from that function.
    ``later_forms`` adds the forms written after the recipe's corpus was built, ``wider`` those
    written after its skills stage was trained. ``form`` replaces the grammar's forms with one
    written elsewhere (``open_framing.open_form``); the talk around it is the grammar's. ``talk``,
    a function of a role ("opener", "before", "polite", "after", "closer"), writes the talk instead
    of the grammar's pieces (``open_talk.talk_maker``); when and where talk goes stays the same.
    ``reword``, a function of a form, edits the form the grammar chose (``open_forms.open_form_words``);
    a form given as ``form`` is left as it is.
    """
    def pick(role: str, pieces: tuple[str, ...]) -> str:
        return talk(role) if talk else rng.choice(pieces)

    g = GRAMMARS[(intent, phrasing_split(split))]
    if form is None:
        form = rng.choice(g.forms + (g.later_forms if later_forms else ()) + (g.wider_forms if wider else ()))
        if reword:
            form = reword(form)
    parts = []
    if rng.random() < 0.35:
        parts.append(pick("opener", g.openers))
    if g.before and rng.random() < 0.3:
        parts.append(pick("before", g.before))
    if rng.random() < 0.25 and not form[0] == "{":
        form = f"{pick('polite', g.polite)} {form[0].lower()}{form[1:]}"
    parts.append(form)
    if g.after and rng.random() < 0.3:
        parts.append(pick("after", g.after))
    if rng.random() < 0.2:
        parts.append(pick("closer", g.closers))
    if chatter and g.chatter and rng.random() < CHATTER_RATE:
        aside = re.sub(r"\{thing\}", lambda _: " ".join(chatter() for _ in range(rng.choice((1, 1, 2)))),
                       rng.choice(g.chatter))
        parts.insert(rng.choice((parts.index(form), len(parts))), aside)
    text = " ".join(parts)
    return vary(rng, text) if noise else text


def vary(rng: random.Random, text: str) -> str:
    """Casing, end punctuation and an occasional typo, never inside a ``{slot}``."""
    roll = rng.random()
    if roll < 0.15:
        text = _outside_slots(text, str.lower)
    elif roll < 0.2:
        text = _outside_slots(text, lambda s: s.upper() if len(s) < 40 else s)
    if rng.random() < 0.3:
        text = re.sub(r"[?.!]$", rng.choice(["", "??", "?!", " ?", "..."]), text)
    if rng.random() < TYPO_RATE:
        text = typo(rng, text)
    return text


def _outside_slots(text: str, change) -> str:
    pieces = SLOT.split(text)
    slots = SLOT.findall(text)
    out = [change(pieces[0])]
    for slot, piece in zip(slots, pieces[1:]):
        out += [slot, change(piece)]
    return "".join(out)


def typo(rng: random.Random, text: str) -> str:
    """Swap two neighbouring letters of one word of four or more letters outside the slots."""
    words = [m for m in re.finditer(r"[A-Za-z]{4,}", text)
             if not any(s.start() <= m.start() < s.end() for s in SLOT.finditer(text))]
    if not words:
        return text
    word = rng.choice(words)
    i = rng.randrange(word.start(), word.end() - 1)
    return text[:i] + text[i + 1] + text[i] + text[i + 2:]


def fill(text: str, values: dict[str, str]) -> str:
    """Put the values into a template; a slot without a value is an error, never left as braces."""
    missing = sorted({s[1:-1] for s in SLOT.findall(text)} - set(values))
    if missing:
        raise KeyError(f"the template {text!r} needs values for {missing}")
    return SLOT.sub(lambda m: str(values[m.group()[1:-1]]), text)


def phrase(rng: random.Random, intent: str, values: dict[str, str], split: str = "train") -> str:
    """A filled surface form of ``intent``: ``template`` then ``fill``."""
    return fill(template(rng, intent, split), values)


def count_forms(intent: str, split: str = "train", *, samples: int = 20_000, seed: int = 0) -> int:
    """How many distinct templates (slots unfilled) ``samples`` draws of ``intent`` produce."""
    rng = random.Random(f"llmkit-count-forms|{intent}|{split}|{seed}")
    return len({template(rng, intent, split) for _ in range(samples)})


def fragments(form: str, min_words: int = 3) -> list[str]:
    """The runs of literal words between a form's slots that have at least ``min_words`` words,
    lower-cased without punctuation: what a held-out sentence must never contain."""
    runs = [re.sub(r"[^a-z' ]", " ", piece.lower()) for piece in SLOT.split(form)]
    return [" ".join(r.split()) for r in runs if len(r.split()) >= min_words]
