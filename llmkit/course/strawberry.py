"""The strawberry experiment: count a letter in a word, in four formats, to see why a model that
reads tokens, not letters, miscounts, and which format fixes it (spelling it out, or the tool).
"""
from __future__ import annotations

import random

from llmkit.course.conversation_data import LETTER_QUESTIONS, Conversation, Expected, check_split, words
from llmkit.course.conversations import check_count, count_answer, letters_conversation, pick_letter
from llmkit.course.tools import count_letters

STRAWBERRY_FORMATS = ("direct", "spelled", "tool", "spell")


def spelled_count(word: str, letter: str) -> str:
    """The word letter by letter with a running count after each match: ``s t r(1) a w b e r(2) r(3) y``."""
    count, parts = 0, []
    for character in word:
        if character.casefold() == letter.casefold():
            count += 1
            parts.append(f"{character}({count})")
        else:
            parts.append(character)
    return " ".join(parts)


def strawberry_tasks(fmt: str, *, split: str = "heldout", seed: int = 0, n: int | None = None) -> list[Conversation]:
    """The strawberry experiment: count a letter in a word, in one of four formats.

    ``direct``: answer with the count at once. ``spelled``: spell the word with a running count
    in a thinking block, then answer. ``tool``: call ``count_letters``. ``spell``: the probe
    "Spell strawberry." -> "s t r a w b e r r y" (spelling alone, no counting).
    The same seed gives the same (word, letter) items in every format, so formats compare fairly.
    ``n=None`` asks about every word of the split once.
    """
    if fmt not in STRAWBERRY_FORMATS:
        raise ValueError(f"fmt must be one of {STRAWBERRY_FORMATS}, got {fmt!r}")
    pool = words(check_split(split))
    rng = random.Random(f"llmkit-strawberry|{split}|{seed}")
    chosen = pool if n is None else [rng.choice(pool) for _ in range(check_count(n))]
    items = [(word, pick_letter(rng, word)) for word in chosen]  # drawn the same way for every format
    return [strawberry_task(fmt, split, word, letter, random.Random(f"llmkit-strawberry-item|{seed}|{i}"))
            for i, (word, letter) in enumerate(items)]


def strawberry_task(fmt: str, split: str, word: str, letter: str, rng: random.Random) -> Conversation:
    """One strawberry-experiment item in format ``fmt`` (see ``strawberry_tasks``) about any word."""
    if fmt == "tool":
        convo = letters_conversation(rng, split, word, letter, offer_others=False)
        return Conversation("strawberry_tool", split, convo.messages, convo.tools, None, convo.expected)
    facts = {"word": word, "letter": letter, "count": count_letters(word, letter), "spelling": " ".join(word)}
    if fmt == "spell":
        messages = [{"role": "user", "content": f"Spell {word}."}, {"role": "assistant", "content": facts["spelling"]}]
        return Conversation("strawberry_spell", split, messages, None, None,
                            Expected(None, None, (facts["spelling"],), facts=facts))
    question = LETTER_QUESTIONS[0].format(letter=letter, word=word)
    answer = count_answer(word, letter, facts["count"])
    content = answer if fmt == "direct" else [{"type": "thinking", "thinking": spelled_count(word, letter)},
                                              {"type": "text", "text": answer}]
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": content}]
    return Conversation(f"strawberry_{fmt}", split, messages, None, None,
                        Expected(None, None, (str(facts["count"]),), facts=facts))
