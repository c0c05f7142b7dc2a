"""The strawberry experiment: count a letter in a word, in four formats, to see why a model that
reads tokens, not letters, miscounts, and which format fixes it (spelling it out, or the tool).

``strawberry_tasks`` are the first version's task sets (``data/build_strawberry.py``). The second
half of this module is the experiment redone from a model taught to spell first
(``data/experiments/strawberry/build.py``): the held-out words, the letters asked about, the
training data of each format, and the scoring.
"""
from __future__ import annotations

import random
import re

from llmkit.course.conversation_data import LETTER_QUESTIONS, REAL_WORDS, Conversation, Expected, check_split, words
from llmkit.course.conversations import check_count, count_answer, letters_conversation, pick_letter
from llmkit.course.spelling import spell, spell_conversation
from llmkit.course.tools import count_letters
from llmkit.course.values import POOLS, invented_word

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


def counting_steps(word: str, letter: str, spell_first: bool = False) -> str:
    """The thinking of the ``spelled`` format: the running count (``spelled_count``), after the plain
    spelling on a line of its own when ``spell_first``.

    The idea: spelling first writes exactly what the "Spell X." skill writes, and the count then
    walks letter tokens already on the page instead of recalling the word's letters and counting in
    the same breath. Measured, it did not help at this size: the plain spelling inside the answer
    was as unreliable as the spelling inside the running count (data/experiments/strawberry/README.md).
    """
    steps = spelled_count(word, letter)
    return f"{spell(word)}\n{steps}" if spell_first else steps


def strawberry_task(fmt: str, split: str, word: str, letter: str, rng: random.Random, *,
                    spell_first: bool = False) -> Conversation:
    """One strawberry-experiment item in format ``fmt`` (see ``strawberry_tasks``) about any word;
    ``spell_first`` writes the plain spelling before the running count (``counting_steps``)."""
    if fmt == "tool":
        convo = letters_conversation(rng, split, word, letter, offer_others=False)
        return Conversation("strawberry_tool", split, convo.messages, convo.tools, None, convo.expected)
    facts = {"word": word, "letter": letter, "count": count_letters(word, letter), "spelling": spell(word)}
    if fmt == "spell":
        return spell_conversation(word, split, kind="strawberry_spell", facts=facts)
    question = LETTER_QUESTIONS[0].format(letter=letter, word=word)
    answer = count_answer(word, letter, facts["count"])
    thinking = {"type": "thinking", "thinking": counting_steps(word, letter, spell_first)}
    content = answer if fmt == "direct" else [thinking, {"type": "text", "text": answer}]
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": content}]
    return Conversation(f"strawberry_{fmt}", split, messages, None, None,
                        Expected(None, None, (str(facts["count"]),), facts=facts))


# ------------------------------------------------------------------- the experiment, from a speller
# The model is first taught to spell (``llmkit.course.spelling``), then each answer format is
# fine-tuned from that speller on the same (word, letter) items and scored on words it never saw.
COUNT_FORMATS = ("direct", "spelled", "tool")
MAX_TOKENS = {"direct": 32, "spelled": 112, "tool": 112, "spell": 64}  # room for a right answer, with slack
SPELL_FIRST_EXTRA_TOKENS = 64  # the plain spelling before the count: one token a letter, 24 letters at most, and slack
SHOWCASE = "ungarbarrylirryburirira"


def balanced_letter(rng: random.Random, word: str) -> str:
    """A letter to ask about, drawn so that the *count* is uniform over the counts ``word`` offers.

    Most letters of a word appear once, so "1" would be right most of the time and a model could
    score well without counting. Choosing the count first (each count some letter of the word has),
    then a letter with that count, leaves guessing little to win. One time in ten the letter is
    one the word lacks (the answer is 0), as in ``pick_letter``.
    """
    lowered = word.casefold()
    by_count: dict[int, list[str]] = {}
    for letter in "abcdefghijklmnopqrstuvwxyz":
        by_count.setdefault(lowered.count(letter), []).append(letter)
    present = sorted(c for c in by_count if c > 0)
    count = 0 if rng.random() < 0.1 or not present else rng.choice(present)
    return rng.choice(by_count[count])


def heldout_words(n_real: int = 24, n_invented: int = 24) -> dict[str, list[str]]:
    """The words the experiment asks about: real ones and invented ones, never trained on.

    Real: the course's held-out word lists. Invented: SHOWCASE and the other invented held-out
    words of ``words("heldout")``, then more from ``invented_word`` with the held-out hash (training
    draws its invented words with the train hash, so it cannot meet one). The lists are fixed, no
    seed; the build script also passes them to every training source as words to exclude.
    """
    real = [w for w in [*REAL_WORDS["heldout"], *POOLS["word"]["heldout"]] if w != SHOWCASE]
    invented = [SHOWCASE] + [w for w in words("heldout") if w not in REAL_WORDS["heldout"]]
    rng = random.Random("llmkit-strawberry-invented-test-words")
    while len(invented) < n_invented:
        word = invented_word(rng, "heldout", (2, 5))
        if word not in invented and word not in real:
            invented.append(word)
    return {"real": list(dict.fromkeys(real))[:n_real], "invented": invented[:n_invented]}


def count_items(word_list: list[str], per_word: int = 2, seed: int = 0) -> list[tuple[str, str]]:
    """``per_word`` different (word, letter) questions per word, letters from ``balanced_letter``."""
    rng = random.Random(f"llmkit-strawberry-count-items|{seed}")
    items = []
    for word in word_list:
        letters: list[str] = []
        while len(letters) < per_word:
            letter = balanced_letter(rng, word)
            if letter not in letters:
                letters.append(letter)
        items += [(word, letter) for letter in letters]
    return items


def format_source(fmt: str, sampler, heldout: list[tuple[str, str]], spelling_share: float = 0.25, *,
                  spell_first: bool = False):
    """``(n, split, seed) -> conversations`` for fine-tuning format ``fmt`` from the speller.

    Train items are lower-case words from ``sampler`` (a ``spelling.WordSampler``) with a
    ``balanced_letter``; the same seed gives the same (word, letter) items in every format. A share
    ``spelling_share`` of them are "Spell X." conversations instead, so the speller keeps its skill
    (as a real model keeps reading its pretraining text). "heldout" draws from ``heldout`` items.
    ``spell_first``: the ``spelled`` format's thinking spells the word before counting (``counting_steps``).
    """
    if fmt not in COUNT_FORMATS:
        raise ValueError(f"fmt must be one of {COUNT_FORMATS}, got {fmt!r}")

    def source(n: int, split: str, seed: int) -> list[Conversation]:
        rng = random.Random(f"llmkit-strawberry-format|{split}|{seed}")  # no fmt in it: same items in every format
        out = []
        for i in range(n):
            if split == "heldout":
                word, letter = heldout[rng.randrange(len(heldout))]
            else:
                word = sampler.lowercase(rng)
                letter = balanced_letter(rng, word)
            item_rng = random.Random(f"llmkit-strawberry-format-item|{split}|{seed}|{i}")
            if split == "train" and rng.random() < spelling_share:
                out.append(spell_conversation(sampler.draw(rng)[0], split))
            else:
                out.append(strawberry_task(fmt, split, word, letter, item_rng, spell_first=spell_first))
        return out
    return source


def answer_count(text: str) -> int | None:
    """The first whole number in an answer ("cranberry has 3 r's." -> 3), or None."""
    found = re.findall(r"\d+", text)
    return int(found[0]) if found else None


def spelled_letters(thinking: str) -> str:
    """'s t r(1) a w' -> 'straw': the letters a spelled-out count wrote, its running counts removed.

    Only the last line is read: with ``spell_first`` that is the line the count was made on.
    """
    lines = thinking.strip().splitlines()
    return "".join(re.sub(r"\(\d+\)", "", lines[-1]).split()) if lines else ""


def started_on_the_word(item: dict) -> bool:
    """Whether a scored spelled item's thinking began with its word's first letter: the step that
    fails when the model cannot find the word in the question."""
    return spelled_letters(item["thinking"])[:1] == item["word"][:1]


def where_the_input_was_right(results: dict) -> dict[str, int]:
    """How often a run's spelled thinking spelled the word right and its tool call carried the exact
    word, and how many of those answers were right: whether a format fails at its input or after it."""
    spelled = [item for item in results["items"]["spelled"] if item["spelled_right"]]
    called = [item for item in results["items"]["tool"] if item["called_tool_right"]]
    return {"spelled_right": len(spelled), "counted_right_on_it": sum(item["correct"] for item in spelled),
            "exact_calls": len(called), "answered_right_on_them": sum(item["correct"] for item in called)}


def score_item(model, tokenizer, fmt: str, word: str, letter: str | None, *, spell_first: bool = False) -> dict:
    """Ask ``model`` one held-out question in format ``fmt`` ("spell": spell ``word``), greedily,
    through the one harness loop (``run_conversation``: ``run_agent`` on a ``Client``).

    The question is the same with or without ``spell_first``; the flag only sets the token budget
    of the ``spelled`` format, which writes the word twice when it spells first."""
    from llmkit.course.evals import run_conversation

    if fmt == "spell":
        task = spell_conversation(word, "heldout")
    else:
        task = strawberry_task(fmt, "heldout", word, letter, random.Random(f"llmkit-strawberry-score|{word}|{letter}"))
    transcript = run_conversation(model, tokenizer, task.prompt, tools=task.tools, system=task.system,
                                  max_new_tokens=MAX_TOKENS[fmt] + (SPELL_FIRST_EXTRA_TOKENS if spell_first else 0))
    text = transcript.final_text
    thinking = "".join(b["thinking"] for turn in transcript.turns for b in turn if b["type"] == "thinking")
    row = {"word": word, "letter": letter, "output": text, "thinking": thinking,
           "output_tokens": transcript.output_tokens}
    if fmt == "spell":
        letters = text.split()
        right = sum(a == b for a, b in zip(letters, word)) / max(len(word), len(letters))  # in place, in order
        return {**row, "correct": text.strip() == spell(word), "letters_right": round(right, 3)}
    count = count_letters(word, letter)
    row.update(count=count, correct=answer_count(text) == count)
    if fmt == "spelled":
        row["spelled_right"] = spelled_letters(thinking) == word
    if fmt == "tool":
        calls = transcript.tool_calls
        row["called_tool_right"] = bool(calls) and calls[0].get("input") == {"word": word, "letter": letter}
    return row


def accuracy(rows: list[dict]) -> float | None:
    """The share of ``rows`` marked correct (None for no rows)."""
    return round(sum(r["correct"] for r in rows) / len(rows), 3) if rows else None


def most_common_answer_share(counts: list[int]) -> float:
    """What always answering the most common true count would score: the bar for "it counts"."""
    return round(max(counts.count(c) for c in set(counts)) / len(counts), 3)
