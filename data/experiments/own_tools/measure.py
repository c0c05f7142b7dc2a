"""The ``own_tool`` kind's evals: does a chat model use a learner's own version of a course tool?

    python data/experiments/own_tools/measure.py --model shipped=data/models/chat \
        --model own_tools=RUN/evals/shipped [--per-kind 100] [--threads 2] [--out F]

For each model folder: the skill evals of the ``own_tool`` and ``own_tool_open`` kinds
(``llmkit.course.own_tools``), greedy through ``Client`` + ``run_agent`` with the recipe's evals
settings (batch, max_tokens, seed), ``--per-kind`` conversations per kind and split. Each asks a
weather, letters or arithmetic question beside a tool for it with another name, other parameters
and another description (one in five offers a tool for another job instead: then no call is
right). On ``unseen_phrasings_and_tools`` the names, parameters, descriptions and phrasings are the
held-out halves of the pools (``own_tool``), or open words around a held-out job word
(``own_tool_open``). The
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


KINDS = ("own_tool", "own_tool_open")


def measure(folder: str, per_kind: int) -> dict:
    """Each kind's evals for one model folder, per split, and the seconds they took."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    started, client, result = time.perf_counter(), Client(folder), {}
    for kind in KINDS:
        report = evaluate_skills(client, per_kind=per_kind, splits=EVAL_SPLITS, kinds=[kind], seed=settings["seed"],
                                 max_tokens=settings["max_tokens"], batch=settings["batch"])
        result[kind] = {split: {k: v for k, v in r.items() if k != "kinds"} for split, r in report.items()}
    return {**result, "seconds": round(time.perf_counter() - started, 1)}


def print_table(results: dict[str, dict]) -> None:
    for kind in KINDS:
        print(f"{kind} evals (" + " | ".join(results) + ")")
        for split in EVAL_SPLITS:
            print(f"  {split}")
            for score in SCORES:
                cells = [f"{r[kind][split].get(score, float('nan')):.2f} (n {r[kind][split].get('n_' + score, 0)})"
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
