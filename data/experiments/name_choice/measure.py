"""How much of choosing a tool is the decoder's doing? One chat checkpoint, three ways to decode.

    python data/experiments/name_choice/measure.py --model FOLDER [--per-kind 25] [--kinds tool]

FOLDER holds config.json, model.safetensors and tokenizer.json (a recipe checkpoint plus the
tokenizer it was trained with). Every conversation of the skill evals (``llmkit.course.skill_scores``)
is replayed greedily through the client three times:

    free        constrain_tools=False: what the model writes on its own
    per_token   valid calls, every token masked one at a time, the tool's name included
    whole       valid calls, the tool's name chosen whole (the client's default)

and the scores of the seen and unseen_phrasings_and_tools splits are printed side by side and
written to results.json beside this script (``--out`` to write elsewhere).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.skill_scores import evaluate_skills
from llmkit.model.weights import load_model

DECODINGS = {"free": False, "per_token": "per_token", "whole": True}
SCORES = ("right_tool", "args_exact", "answer_from_result", "tool_call_valid", "ends_turn")
SPLITS = ("seen", "unseen_phrasings_and_tools")


def measure(folder: Path, per_kind: int, kinds: list[str]) -> dict:
    model, tokenizer = load_model(folder)
    client = Client.from_model(model.eval(), tokenizer)
    results = {}
    for name, setting in DECODINGS.items():
        started = time.perf_counter()
        report = evaluate_skills(client, per_kind=per_kind, kinds=kinds, splits=SPLITS, constrain_tools=setting)
        results[name] = {split: {score: report[split].get(score) for score in SCORES} for split in SPLITS}
        print(f"{name:>10}: {time.perf_counter() - started:.0f} s", flush=True)
    return results


def table(results: dict) -> str:
    rows = [f"{'score':<20}" + "".join(f"{d + ' ' + s[:6]:>18}" for d in results for s in SPLITS)]
    for score in SCORES:
        cells = "".join(f"{results[d][s][score] if results[d][s][score] is not None else '-':>18}"
                        for d in results for s in SPLITS)
        rows.append(f"{score:<20}{cells}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--per-kind", type=int, default=25)
    parser.add_argument("--kinds", default="tool", help="comma-separated skill kinds (default: tool)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = measure(args.model, args.per_kind, args.kinds.split(","))
    print(table(results))
    args.out.write_text(json.dumps({"model": str(args.model), "per_kind": args.per_kind, "kinds": args.kinds,
                                    "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
