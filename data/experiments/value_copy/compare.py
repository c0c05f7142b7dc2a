"""The skill evals of one chat model with its values chosen whole (``constrain_tools="copy"``) and as it writes them.

    python data/experiments/value_copy/compare.py [--model chat] [--per-kind 100] [--modes on copy] [--threads 2]
    python data/experiments/value_copy/compare.py --per-kind 50 --show weather letters   # what copy mode chose wrong

The recipe's evals stage (``data/models/recipe/evals.json``: seed, batch, max_tokens) scores the
model through ``Client`` with the client's default constrained decoding (``on``: calls always valid,
the tool's name chosen whole). ``copy`` adds ``llmkit.chat.value_copy``: every argument value is
chosen whole among the spans and numbers of the conversation. Same conversations, same greedy
decoding; only the decoding of a value differs. Each mode also gets a breakdown of the
tool-calling conversations on ``unseen_phrasings_and_tools`` by what went wrong first
(``failure``). Writes results.json beside this script (``--out`` elsewhere).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.forced_scores import TOOL_CALLING_KINDS
from llmkit.course.skill_scores import batched_runs, calls_in, evaluate_skills, same_value
from llmkit.course.skills import EVAL_SPLITS, MIX, make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

MODES = {"on": True, "copy": "copy"}
HARDEST = "unseen_phrasings_and_tools"


def failure(expected: list, calls: list[dict]) -> str:
    """What went wrong first in one conversation that needed calls: "exact" when nothing did."""
    made = [(call.get("name"), call.get("input")) for call in calls]
    if len(made) >= len(expected) and all(name == want and same_value(args, want_args)
                                          for (name, args), (want, want_args) in zip(made, expected)):
        return "exact" if len(made) == len(expected) else "extra_calls"
    if not made:
        return "no_call"
    if made[0][0] != expected[0][0]:
        return "wrong_tool"
    return "wrong_args" if not same_value(made[0][1], expected[0][1]) else "later_call_wrong"


def hardest_calls(client: Client, kinds, mode, per_kind: int, settings: dict) -> list[tuple]:
    """Each conversation of ``kinds`` on the hardest split, with the calls the model made in it:
    the evals' own conversations, replayed (``evaluate_skills`` keeps only the scores)."""
    specs = [spec for kind in kinds
             for spec in make_skills(per_kind, split=HARDEST, seed=settings["seed"], kinds=[kind])]
    outcomes = batched_runs(client, specs, batch=settings["batch"], max_tokens=settings["max_tokens"],
                            constrain_tools=mode)
    return [(spec, calls_in(transcript)) for spec, (transcript, _) in zip(specs, outcomes)]


def failures(client: Client, mode, per_kind: int, settings: dict) -> dict[str, dict[str, int]]:
    """``failure`` counted per tool-calling kind on the hardest split."""
    counts: dict[str, collections.Counter] = {kind: collections.Counter() for kind in TOOL_CALLING_KINDS}
    for spec, calls in hardest_calls(client, TOOL_CALLING_KINDS, mode, per_kind, settings):
        counts[spec.kind][failure(list(spec.expected.calls), calls)] += 1
    return {kind: dict(sorted(counter.items())) for kind, counter in counts.items()}


def show_misses(client: Client, kinds: list[str], per_kind: int, settings: dict) -> None:
    """Print the hardest split's conversations of ``kinds`` whose first call under "copy" has the
    right tool and wrong arguments: the request, what was wanted, what was chosen."""
    for spec, calls in hardest_calls(client, kinds, "copy", per_kind, settings):
        if failure(list(spec.expected.calls), calls) == "wrong_args":
            print(f"{spec.kind}: {spec.prompt[-1]['content']!r}\n    wanted {spec.expected.calls[0][1]}, "
                  f"chose {calls[0].get('input')}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="chat", help="a shipped model's name or a model folder (default chat)")
    parser.add_argument("--per-kind", type=int, default=100, help="conversations per kind and split (default 100)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    parser.add_argument("--show", nargs="+", metavar="KIND", choices=list(TOOL_CALLING_KINDS),
                        help="instead, print the conversations of these kinds whose arguments copy mode chose wrong")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    client = Client(args.model)
    if args.show:
        show_misses(client, args.show, args.per_kind, settings)
        return
    result: dict = {"command": "python data/experiments/value_copy/compare.py " + " ".join(argv or sys.argv[1:]),
                    "model": args.model, "per_kind": args.per_kind, "settings": settings, "modes": {}}
    for name in args.modes:
        started = time.perf_counter()
        evals = evaluate_skills(client, per_kind=args.per_kind, splits=EVAL_SPLITS, kinds=list(MIX),
                                seed=settings["seed"], max_tokens=settings["max_tokens"], batch=settings["batch"],
                                constrain_tools=MODES[name])
        result["modes"][name] = {"evals": evals, "failures": failures(client, MODES[name], args.per_kind, settings),
                                 "seconds": round(time.perf_counter() - started, 1)}
        print(name, {split: evals[split]["args_exact"] for split in EVAL_SPLITS}, flush=True)
    atomic_write(args.out, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
