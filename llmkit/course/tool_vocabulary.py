"""The real words a skill conversation's made-up tools are named with: 9,000 words of the corpus.

With a few dozen words to name tools from, a model learns which words start a tool name and
writes one from memory: on held-out tools named with other real words (``quarry_capacity``) it
wrote ``no_q`` or a training verb. Drawn from thousands of words, split by the same hash as the
values (``values.value_split``), a held-out tool's words are the same kind of word as a training
tool's, only never seen in a name, so reading the name off the tool line is the only way to be
right on both sides. ``toolgen`` takes its split halves, minus its own word pools. With 3,000
words (1,500 a side) a model still copied training tool words into its thinking far better than
held-out ones (35 against 15 times in 40): it had learnt which words can name a tool. So the list
is as long as the corpus allows, about every word it holds at least three times, too many to learn
one by one.

``WORDS`` (read from ``tool_vocabulary.txt`` beside this file, one word a line) is ``corpus_words``
of ``data/corpus/train.txt``: its most frequent lower-case words of 4-10 letters (Shakespeare's,
so ``knave_sorrow`` is a fine tool name). Write the file again with ``python -m
llmkit.course.tool_vocabulary > llmkit/course/tool_vocabulary.txt``; a test checks that the two agree.
"""
from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

WORD_COUNT = 9000
WORD_PATTERN = re.compile(r"\b[a-z]{4,10}\b")


def corpus_words(text: str, n: int = WORD_COUNT) -> list[str]:
    """The ``n`` most frequent lower-case words of 4-10 letters in ``text``, most frequent first
    (ties in alphabetical order, so the list is a pure function of the text)."""
    counts = Counter(WORD_PATTERN.findall(text))
    return [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]]


WORDS = (Path(__file__).parent / "tool_vocabulary.txt").read_text(encoding="utf-8").split()


if __name__ == "__main__":
    text = open(sys.argv[1] if len(sys.argv) > 1 else "data/corpus/train.txt", encoding="utf-8").read()
    print("\n".join(corpus_words(text)))
