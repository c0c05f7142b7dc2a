"""How well does a base model read each kind of text? Bits per byte of base models on held-out texts.

The texts: Shakespeare's held-out plays (the project's bar: 1.99), the corpus stage's held-out
structured text, 1,000 held-out dictionary entries (modern English: ``corpus_english``), and the
first user message of 300 skill conversations of each split, the words a chat model must read to
choose a tool and copy a value. A base that reads the held-out phrasings better has more to start
fine-tuning from::

    python data/experiments/english_base/bases.py --model shipped=data/models/base \\
        --model english=RUN/pretrain_english/shipped --threads 2

It prints a table and writes ``bases.json`` beside this script.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from llmkit.course.recipe_stages import DOC_SEPARATOR, dictionary_documents, load_recipe
from llmkit.course.skills import EVAL_SPLITS, make_skills
from llmkit.course.structured_text import documents
from llmkit.model.weights import load_model
from llmkit.paths import data_path
from llmkit.training.train import bits_per_byte

REQUESTS = 300  # first user messages per split


def corpus_settings() -> dict:
    """The english recipe's corpus stage settings, so the held-out texts are the ones it kept apart."""
    recipe = load_recipe(data_path("models", "recipe_english.json"))
    return next(s["settings"] for s in recipe["stages"] if s["name"] == "corpus_english")


def requests(split: str, n: int = REQUESTS) -> str:
    """The first user message of ``n`` evaluation-seeded skill conversations of ``split``, a line each."""
    first = [c.messages[0]["content"] for c in make_skills(n, split=split, seed="bases")]
    return "\n".join(m for m in first if isinstance(m, str))


def held_out_texts() -> dict[str, str]:
    """Each held-out text by name: the three the english corpus kept apart, and the requests of each split."""
    settings = corpus_settings()
    _, dictionary = dictionary_documents(settings["dictionary_entries_per_document"],
                                         settings["heldout_dictionary_entries"], seed=settings["seed"])
    structured = documents(settings["heldout_structured_documents"], seed=settings["seed"] + 1, split="heldout")
    texts = {"shakespeare": data_path("corpus", "heldout.txt").read_text(encoding="utf-8"),
             "structured": DOC_SEPARATOR.join(structured), "dictionary": dictionary}
    texts.update({f"requests_{split}": requests(split) for split in EVAL_SPLITS})
    return texts


def portable(folder: str) -> str:
    """``folder`` as the record may name it: relative inside the checkout, else ``RUN/<stage>/<folder>``
    (a run folder is on somebody's machine, and the repository names no machine's paths)."""
    path = Path(folder).resolve()
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else "RUN/" + "/".join(path.parts[-2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FOLDER")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("bases.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    texts, results, start = held_out_texts(), {}, time.perf_counter()
    for spec in args.model:
        name, folder = spec.split("=", 1)
        model, tokenizer = load_model(folder)
        results[name] = {text: round(bits_per_byte(model, tokenizer, body)["bpb"], 4) for text, body in texts.items()}
    print(f"{'bits/byte':<36}" + "".join(f"{name:>12}" for name in results))
    for text in texts:
        print(f"{text:<36}" + "".join(f"{results[name][text]:>12.3f}" for name in results))
    models = " ".join(f"--model {name}={portable(folder)}" for name, folder in (m.split("=", 1) for m in args.model))
    record = {"command": f"python data/experiments/english_base/bases.py {models}",
              "bytes": {text: len(body.encode()) for text, body in texts.items()}, "bits_per_byte": results,
              "seconds": round(time.perf_counter() - start, 1)}
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
