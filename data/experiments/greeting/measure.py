"""Does a chat model greet a learner by the name they gave? ``greets_by_name`` beside ``memory``.

    python data/experiments/greeting/measure.py --model shipped=data/models/chat \
        --model skills=data/models/skills [--per-kind 100] [--threads 2] [--out F]

For each model folder: the skill evals of the ``memory`` kind, greedy through ``Client`` +
``run_agent`` with the recipe's evals settings (batch, max_tokens, seed), ``--per-kind``
conversations per split. ``memory`` replays the right greeting ("Hello, Wei!") as history and asks
for the name a turn or two later; ``greets_by_name`` gives the model the introduction alone and
scores its own first reply (``llmkit.course.skill_scores.introduction``). A learner's conversation
needs both: the model writes the greeting the later answer reads. The conversations are the evals
stage's, so the ``memory`` figures equal a full evals report's. ``first_replies`` sorts what the
model said instead of a greeting (a refusal, a tool call, a greeting with another word for the
name). Prints a table and writes results.json beside this script.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.skill_scores import calls_in, evaluate_skills, final_text, introduction, run_one
from llmkit.course.skills import EVAL_SPLITS, make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

SCORES = ("memory", "greets_by_name", "ends_turn")
REPLIES = ("a greeting with the name", "a tool call", "a refusal", "a greeting, another word", "other")
GREETINGS = ("Hello", "Hi ", "Nice to meet")


def reply_kind(name: str, transcript: list[dict]) -> str:
    """What a first reply to an introduction is. A refusal that echoes the name ("I have no tool
    for the as Cem, ...") is a refusal here, though ``greets_by_name``, which only asks whether the
    reply holds the name, counts it."""
    text = final_text(transcript)
    if calls_in(transcript):
        return "a tool call"
    if text.startswith("I have no") or "can't" in text:  # the missing kind's refusals
        return "a refusal"
    if name in text:
        return "a greeting with the name"
    return "a greeting, another word" if any(text.startswith(g) for g in GREETINGS) else "other"


def first_replies(client, settings: dict, per_kind: int, split: str) -> dict:
    """How many first replies of each kind (``REPLIES``), and three examples of each."""
    counts, examples = dict.fromkeys(REPLIES, 0), {kind: [] for kind in REPLIES}
    for spec in make_skills(per_kind, split=split, seed=settings["seed"], kinds=["memory"]):
        transcript, _ = run_one(client, introduction(spec), max_tokens=settings["max_tokens"])
        kind = reply_kind(spec.expected.name, transcript)
        counts[kind] += 1
        if len(examples[kind]) < 3:
            examples[kind].append([spec.messages[0]["content"], final_text(transcript)])
    return {"counts": counts, "examples": examples}


def measure(folder: str, per_kind: int) -> dict:
    """The memory kind's scores for one model folder, per split, and the seconds they took."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    started, client = time.perf_counter(), Client(folder)
    report = evaluate_skills(client, per_kind=per_kind, splits=EVAL_SPLITS, kinds=["memory"], seed=settings["seed"],
                             max_tokens=settings["max_tokens"], batch=settings["batch"])
    result = {split: {k: v for k, v in r.items() if k.removeprefix("n_") in SCORES} for split, r in report.items()}
    replies = {split: first_replies(client, settings, per_kind, split) for split in ("seen", "unseen_phrasings_and_tools")}
    return {**result, "first_replies": replies, "seconds": round(time.perf_counter() - started, 1)}


def print_table(results: dict[str, dict]) -> None:
    print("memory kind (" + " | ".join(results) + ")")
    for split in EVAL_SPLITS:
        print(f"  {split}")
        for score in SCORES:
            cells = [f"{r[split][score]:.2f} (n {r[split]['n_' + score]})" for r in results.values()]
            print(f"    {score:<16} " + " | ".join(cells))
    for split in ("seen", "unseen_phrasings_and_tools"):
        print(f"  first replies, {split}")
        for kind in REPLIES:
            print(f"    {kind:<26} " + " | ".join(str(r["first_replies"][split]["counts"][kind]) for r in results.values()))


def named_folder(text: str) -> tuple[str, str]:
    """``NAME=FOLDER`` as (name, folder), for argparse."""
    name, sep, folder = text.partition("=")
    if not (sep and name and folder):
        raise argparse.ArgumentTypeError(f"{text!r}: give each model as NAME=FOLDER")
    return name, folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, type=named_folder, metavar="NAME=FOLDER")
    parser.add_argument("--per-kind", type=int, default=100, help="conversations per split")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {name: measure(folder, args.per_kind) for name, folder in args.model}
    print_table(results)
    atomic_write(args.out, json.dumps({"command": "python data/experiments/greeting/measure.py " + " ".join(sys.argv[1:]),
                                       "per_kind": args.per_kind, "models": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
