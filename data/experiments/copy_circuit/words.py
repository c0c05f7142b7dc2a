"""Can a model copy across a space? The first id of a word, measured on random word spans and on real lists.

    python data/experiments/copy_circuit/words.py --model FOLDER [FOLDER ...] [--lists 30]

With the course's ``spaced`` pre-split a space is an id of its own, so the id after a space follows
every word and copying it needs the two ids before it. For each model folder (config.json,
model.safetensors, tokenizer.json) this prints, teacher-forced:

- ``copy_words_by_place`` (``llmkit.training.train``): random word spans said twice, accuracy at a
  word's first id, at the space, inside a word;
- on ``--lists`` real lists ("List: w1 ... w6\\nAgain: w1 ... w6"), of corpus words and of made-up
  words, the accuracy on every id of the second saying and on the first id after each space.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from llmkit.course import tool_vocabulary
from llmkit.course.values import invented_word
from llmkit.model.weights import load_model
from llmkit.training.train import copy_words_by_place


def list_copy(model, tokenizer, make_word, lists: int, words: int = 6) -> dict[str, float | None]:
    """Accuracy on the second saying of ``lists`` word lists: every id, and the first id after a space."""
    right = total = right_start = starts = 0
    for _ in range(lists):
        items = " ".join(make_word() for _ in range(words))
        ids = tokenizer.encode_ordinary(f"List: {items}\nAgain: {items}")
        first = len(tokenizer.encode_ordinary(f"List: {items}\nAgain:"))
        with torch.no_grad():
            predicted = model(torch.tensor([ids]))[0].argmax(-1).tolist()
        for i in range(first, len(ids)):
            ok = predicted[i - 1] == ids[i]
            right, total = right + ok, total + 1
            if i > first and tokenizer.decode([ids[i - 1]]) == " ":
                right_start, starts = right_start + ok, starts + 1
    return {"every_id": round(right / total, 3),  # after_a_space is None where a space is never an id alone
            "after_a_space": round(right_start / starts, 3) if starts else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", required=True, type=Path)
    parser.add_argument("--lists", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for folder in args.model:
        model, tokenizer = load_model(folder)
        model.eval()
        rng = random.Random(0)
        places = {k: round(v, 3) for k, v in copy_words_by_place(model, tokenizer).items()}
        corpus = list_copy(model, tokenizer, lambda: rng.choice(tool_vocabulary.WORDS), args.lists)
        made_up = list_copy(model, tokenizer, lambda: invented_word(rng, "train", (2, 3)), args.lists)
        print(f"{folder}\n  word spans: {places}\n  lists of corpus words: {corpus}\n  lists of made-up words: {made_up}")


if __name__ == "__main__":
    main()
