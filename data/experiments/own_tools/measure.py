"""The ``own_tool`` kind's evals: does a chat model use a learner's own version of a course tool?

    python data/experiments/own_tools/measure.py --model shipped=data/models/chat \
        --model own_tools=RUN/evals/shipped [--per-kind 100] [--threads 2] [--out F]

For each model folder: the skill evals of the ``own_tool`` kind (``llmkit.course.own_tools``),
greedy through ``Client`` + ``run_agent`` with the recipe's evals settings (batch, max_tokens,
seed), ``--per-kind`` conversations per split. Each asks a weather, letters or arithmetic question
beside a tool for it with another name, other parameters and another description (one in five
offers a tool for another job instead: then no call is right). On ``unseen_phrasings_and_tools``
the names, parameters, descriptions and phrasings are the held-out halves of the pools. The
conversations depend only on ``--per-kind`` and the evals settings, so two runs of this script
score the same ones. Prints a table and writes results.json beside this script.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.skill_scores import evaluate_skills
from llmkit.course.skills import EVAL_SPLITS
from llmkit.files import atomic_write
from llmkit.paths import data_path

SCORES = ("tool_call_valid", "calls_made", "right_tool", "args_exact", "answer_from_result", "ends_turn",
          "no_invention")


def measure(folder: str, per_kind: int) -> dict:
    """The own_tool evals of one model folder, per split, and the seconds they took."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    started = time.perf_counter()
    report = evaluate_skills(Client(folder), per_kind=per_kind, splits=EVAL_SPLITS, kinds=["own_tool"],
                             seed=settings["seed"], max_tokens=settings["max_tokens"], batch=settings["batch"])
    return {"evals": {split: {k: v for k, v in r.items() if k != "kinds"} for split, r in report.items()},
            "seconds": round(time.perf_counter() - started, 1)}


def print_table(results: dict[str, dict]) -> None:
    names = list(results)
    print("own_tool evals (" + " | ".join(names) + ")")
    for split in EVAL_SPLITS:
        print(f"  {split}")
        for score in SCORES:
            cells = [f"{r['evals'][split].get(score, float('nan')):.2f} (n {r['evals'][split].get('n_' + score, 0)})"
                     for r in results.values()]
            print(f"    {score:<20} " + " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FOLDER")
    parser.add_argument("--per-kind", type=int, default=100, help="conversations per split")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    pairs = [spec.split("=", 1) for spec in args.model]
    if any(len(pair) != 2 or not all(pair) for pair in pairs):
        parser.error("give each model as NAME=FOLDER")
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {name: measure(folder, args.per_kind) for name, folder in pairs}
    print_table(results)
    command = "python data/experiments/own_tools/measure.py " + " ".join(sys.argv[1:])
    atomic_write(args.out, json.dumps({"command": command, "per_kind": args.per_kind, "models": results},
                                      indent=1) + "\n")


if __name__ == "__main__":
    main()
