"""Invented cities, names and words for the course's fine-tuning data, so the model learns to copy.

The synthetic data has few cities, names and words; a small model memorises them instead of
learning to copy them from the question into a tool call and back. ``with_fresh_entity`` swaps
some for invented ones (never a held-out value), so copying is the only way to get them right.
"""
from __future__ import annotations

import dataclasses
import functools
import random
import re

from llmkit.course.conversation_data import (CITIES, NAMES, SYLLABLES, WEATHER_QUESTIONS, WEATHER_THINKING,
                                             Conversation, words)
from llmkit.course.conversations import as_react, letters_conversation, repeat_conversation, weather_conversation
from llmkit.paths import data_path
from llmkit.tokens.words import word_ids

ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
          "br", "ch", "cl", "dr", "fl", "gr", "kr", "ph", "pl", "qu", "sh", "sk", "st", "th", "tr", "v"]
NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "ie", "oa", "ou", "y"]
CODAS = ["", "", "", "", "n", "r", "l", "s", "t", "m", "x", "k", "nd", "rt", "sh", "v"]


def varied_syllable(rng: random.Random) -> str:
    """One random syllable (onset + vowel + coda) over the whole alphabet.

    Invented names built from a short fixed syllable list are made of the same few dozen tokens,
    so a model can learn to reproduce *those tokens* without learning to copy in general, and
    then fails on a real held-out name. Thousands of different syllables tokenize into hundreds
    of different pieces: copying is then the only way to win.
    """
    return rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)


class CopyWords:
    """The corpus's words, indexed by the tokens they are made of, to draw names for copying practice.

    Copying a name is an induction step per token ("after the earlier 'V' came 'iol'"), and a
    small model only copies tokens it has practised copying. Invented syllables re-tokenize into
    the few hundred common pieces, so names made of rarer tokens stay unpractised. ``draw`` picks a
    *token* first, uniformly, then a capitalised corpus word that contains it, so a rare token is
    practised as often as a common one. Held-out values (``taken``) are never drawn.
    """

    def __init__(self, tokenizer, text: str, taken: set[str]):
        # compared without case: a word is drawn capitalised for a name and lower-cased for a
        # letter-counting question, and neither form may be a held-out value
        folded = {value.lower() for value in taken}
        found = {w.capitalize() for w in re.findall(r"[A-Za-z]{3,10}", text) if w.lower() not in folded}
        index: dict[int, list[str]] = {}
        for word in sorted(found):
            for token in set(word_ids(tokenizer, word)):  # the space's own token is no part of a name
                index.setdefault(token, []).append(word)
        self.index = index
        self.tokens = sorted(index)

    @classmethod
    def for_corpus(cls, tokenizer) -> CopyWords:
        """The words of the course corpus (``data/corpus/train.txt``), never a held-out value."""
        return cls(tokenizer, data_path("corpus", "train.txt").read_text(encoding="utf-8"), heldout_values())

    def draw(self, rng: random.Random) -> str:
        """A capitalised word holding a token drawn uniformly from every token the words use."""
        return rng.choice(self.index[rng.choice(self.tokens)])


def invent(rng: random.Random, syllables: tuple[int, int], taken: set[str], capital: bool,
           varied: bool = False, lexicon: CopyWords | None = None) -> str:
    """A made-up word of ``syllables`` (low, high) syllables that is not in ``taken``; ``varied``
    draws syllables over the whole alphabet (``varied_syllable``), else from ``SYLLABLES``; with
    ``lexicon``, half of the words are instead drawn from it (``CopyWords``)."""
    if lexicon is not None and rng.random() < 0.5:
        word = lexicon.draw(rng)
        return word if capital else word.lower()
    while True:
        pick = (lambda: varied_syllable(rng)) if varied else (lambda: rng.choice(SYLLABLES))
        text = "".join(pick() for _ in range(rng.randint(*syllables)))
        text = text.capitalize() if capital else text
        if text not in taken:
            return text


@functools.cache
def heldout_values() -> set[str]:
    """Every city, name and word of the held-out split: an invented value must never be one."""
    return set(CITIES["heldout"]) | set(NAMES["heldout"]) | set(words("heldout"))


def with_fresh_entity(conversation: Conversation, rng: random.Random, varied: bool = False,
                      lexicon: CopyWords | None = None) -> Conversation:
    """The same kind of conversation about a freshly invented city, name or word.

    The training split has only 26 cities (52 forecasts), 24 names and 52 words: a small model
    can memorise "Pune -> 31%" instead of learning to *copy* the city into the call and the
    number out of the tool result, and then fails on every held-out city. Invented values
    (never a held-out one) make copying the only way to get the answer right. Weather and letter
    conversations are rebuilt, so the tool results stay real; in memory and no-tool conversations
    the name or city is swapped in the text. A ReAct weather or letters conversation is rebuilt the
    same way and rewritten as ReAct text, and a repeat conversation gets as many invented words.
    Other kinds come back unchanged.
    """
    taken, kind, facts = heldout_values(), conversation.kind, conversation.expected.facts
    if kind == "react" and facts["task"] in ("weather", "letters"):  # only the facts of the original are read
        return as_react(with_fresh_entity(dataclasses.replace(conversation, kind=facts["task"]), rng, varied, lexicon))
    if kind == "weather":
        question = rng.choice(list(WEATHER_QUESTIONS))
        city = invent(rng, (1, 3) if varied else (2, 3), taken, True, varied, lexicon)
        return weather_conversation(city, facts["day"], question=question, thinking=rng.choice(WEATHER_THINKING),
                                    split="train")
    if kind == "letters":
        word = invent(rng, (2, 8) if not varied else (1, 4), taken, False, varied, lexicon)
        return letters_conversation(rng, "train", word=word)
    if kind == "repeat":
        items = [invent(rng, (1, 3), taken, rng.random() < 0.5, varied, lexicon) for _ in facts["items"]]
        return repeat_conversation(rng, "train", items)
    old = facts.get("name") if kind == "memory" else facts.get("city") if kind == "no_tool" else None
    if old is None:
        return conversation
    new = invent(rng, (1, 3) if kind == "memory" or varied else (2, 3), taken, True, varied, lexicon)
    swap = lambda text: re.sub(rf"\b{re.escape(old)}\b", new, text)  # noqa: E731
    messages = [{"role": m["role"], "content": swap(m["content"]) if isinstance(m["content"], str) else
                 [{**b, **{k: swap(b[k]) for k in ("text", "thinking") if k in b}} for b in m["content"]]}
                for m in conversation.messages]
    return dataclasses.replace(conversation, messages=messages)
