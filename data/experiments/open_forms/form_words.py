"""How often the base's pretraining text uses the words of the request forms: training forms against held-out ones.

    python data/experiments/open_forms/form_words.py [--corpus data/corpus/train.txt] [--out form_words.json]

A held-out request form such as "Tally up the {letter}'s within {word}." is grammatical English.
A model can read it only if it knows what its words do, and it learned English in pretraining.
This counts each word of the forms (slots left out) in a corpus: the words that only held-out
forms use, against the words of the training forms. The default corpus is the Shakespeare text
the recipe's corpus starts from (``data/corpus/train.txt``). The recipe's whole pretraining text
(``RUN/corpus/train.txt``, written by ``python -m llmkit recipe data/models/recipe.json --out-dir RUN
--stop-after corpus`` in a few seconds) also holds dialogues built from the training forms, so
there the training words count twice over.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter
from pathlib import Path

from llmkit.course.phrasing import SLOT
from llmkit.course.phrasing_pools import HELDOUT, TRAIN, Pieces
from llmkit.files import atomic_write
from llmkit.paths import data_path

WORD = re.compile(r"[a-z']+")
RARE = 2  # a word seen this many times or fewer: the base cannot have learned what it does


def form_words(pieces: Pieces, *, later: bool = False) -> set[str]:
    """The lower-case words of ``pieces``' request forms (and its later forms), slots left out."""
    groups = [pieces.forms] + ([pieces.later_forms] if later else [])
    return {w for forms in groups for fs in forms.values() for f in fs for w in WORD.findall(SLOT.sub(" ", f.lower()))}


def word_counts(text: str) -> Counter:
    return Counter(WORD.findall(text.lower()))


def measure(text: str) -> dict:
    """Counts of the held-out-only and the training form words in ``text``, with their medians."""
    counts = word_counts(text)
    training = form_words(TRAIN, later=True)
    held_out_only = form_words(HELDOUT) - training

    def summary(words: set[str]) -> dict:
        seen = {w: counts[w] for w in sorted(words)}
        return {"words": len(seen), "median_count": statistics.median(seen.values()),
                "rare": sorted(w for w, n in seen.items() if n <= RARE), "counts": seen}
    return {"corpus_words": sum(counts.values()), "rare_means_at_most": RARE,
            "held_out_only": summary(held_out_only), "training": summary(training)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=data_path("corpus", "train.txt"))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("form_words.json"))
    args = parser.parse_args()
    report = measure(args.corpus.read_text(encoding="utf-8"))
    for name in ("held_out_only", "training"):
        part = report[name]
        print(f"{name:14s} {part['words']:4d} words, median count {part['median_count']:g}, "
              f"{len(part['rare'])} seen at most {RARE} times: {' '.join(part['rare'])}")
    print(f"({report['corpus_words']:,} words of text)")
    atomic_write(args.out, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
