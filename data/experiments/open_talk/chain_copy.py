"""Teacher-forced argument copying at each stage of a chat chain: where does a gain go?

    python data/experiments/open_talk/chain_copy.py --model skills=data/models/skills \
        --model chat=data/models/chat [--model NAME=FOLDER ...] [--threads 2]

``compare.py`` measured open talk's copying at the end of ``sft_skills``; the chat model is made by
two more stages (``sft_polish``, ``dpo``). This scores every model named on the same conversations:
``argument_copy`` (every token before an argument value given, the value's tokens scored) on 100
conversations of the tool-calling kinds per split, seed 11, the ``in_prompt`` values (those the
prompt holds in the same tokens). Writes chain_copy.json beside this script (``--out`` elsewhere).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from llmkit.course.forced_scores import TOOL_CALLING_KINDS, argument_copy
from llmkit.course.skills import EVAL_SPLITS, make_skills
from llmkit.files import atomic_write
from llmkit.model.weights import load_model

CONVERSATIONS, SEED = 100, 11


def copying(folder: str) -> dict[str, dict]:
    """``argument_copy``'s ``in_prompt`` figures for one model, per split."""
    model, tokenizer = load_model(folder)
    model.eval()
    return {split: argument_copy(model, tokenizer, make_skills(CONVERSATIONS, split=split, seed=SEED,
                                                               kinds=list(TOOL_CALLING_KINDS)))["in_prompt"]
            for split in EVAL_SPLITS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER", required=True)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("chain_copy.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {}
    for name, folder in (spec.split("=", 1) for spec in args.model):
        results[name] = copying(folder)
        print(name, "  ".join(f"{split}: {r['right']:.2f} (first token {r['first_token']:.2f}, n {r['n']})"
                              for split, r in results[name].items()), flush=True)
    command = "python data/experiments/open_talk/chain_copy.py " + " ".join(sys.argv[1:])
    atomic_write(args.out, json.dumps({"command": command, "conversations": CONVERSATIONS, "seed": SEED,
                                       "models": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
