"""Which held-out factor costs the chat model its arguments: new phrasings, or new tool words?

    python data/experiments/held_out_factors/measure.py [--model chat] [--per-kind 100] [--threads 2]

The evals' hardest split holds out three things at once: the phrasings, the tool words (names,
parameter names, descriptions) and the values. ``llmkit.course.skills.SPLIT_SOURCES`` also has the
two splits in between, each with one more factor held out than ``unseen_values``: ``unseen_phrasings``
(training tool words) and ``unseen_tools`` (training phrasings). This script measures a model on
those two with the recipe's evals settings (greedy, ``data/models/recipe/evals.json``), on the kinds
whose replies carry arguments. It also measures teacher-forced ``argument_copy`` on all four
splits. The two outer splits' greedy scores come from the model's committed ``evals.json``: a
conversation depends only on its split, kind, index and seed, so they are the same conversations.
It prints one table and writes results.json beside this script (``--out`` elsewhere).

    python data/experiments/held_out_factors/measure.py --show letters [--model chat] [--n 6]

prints instead the first ``--n`` conversations of one kind on ``unseen_values`` and
``unseen_phrasings`` (the evals' seed): the request, the call it wants and the call the model wrote.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.forced_scores import TOOL_CALLING_KINDS, argument_copy
from llmkit.course.skill_scores import args_exact, calls_in, evaluate_skills, run_one
from llmkit.course.skills import make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

OUTER_SPLITS = ("unseen_values", "unseen_phrasings_and_tools")  # in evals.json already
ONE_FACTOR_SPLITS = ("unseen_phrasings", "unseen_tools")  # measured here
FACTOR_SPLITS = (OUTER_SPLITS[0], *ONE_FACTOR_SPLITS, OUTER_SPLITS[1])
SCORES = ("tool_call_valid", "right_tool", "args_exact", "answer_from_result")
ARGUMENT_CONVERSATIONS, ARGUMENT_SEED = 100, 11  # as word_base/compare.py, so the figures line up


def argument_kinds(evals: dict) -> list[str]:
    """The kinds whose conversations score ``args_exact``: those with calls to copy values into."""
    return [kind for kind, scores in evals["unseen_values"]["kinds"].items() if scores.get("n_args_exact")]


def pooled(by_kind: dict[str, dict], kinds: list[str]) -> dict[str, float | int]:
    """Each score over ``kinds`` together, weighted by how many conversations it scored in each."""
    out: dict[str, float | int] = {}
    for score in SCORES:
        n = sum(by_kind[k][f"n_{score}"] for k in kinds)
        out[score] = sum(by_kind[k][score] * by_kind[k][f"n_{score}"] for k in kinds) / n if n else 0.0
        out[f"n_{score}"] = n
    return out


def model_folder(model: str) -> Path:
    """A folder given by path, or a shipped model by name ("chat")."""
    return Path(model) if Path(model).is_dir() else data_path("models", model)


def measure(model: str, per_kind: int) -> dict:
    """Greedy scores on the one-factor splits, the outer ones from evals.json, teacher-forced copy on all."""
    folder = model_folder(model)
    committed = json.loads((folder / "evals.json").read_text())
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    if per_kind != settings["per_kind"]:
        raise SystemExit(f"--per-kind must be the recipe's {settings['per_kind']} for the outer splits to be "
                         "the same conversations as evals.json")
    kinds = argument_kinds(committed)
    started = time.perf_counter()
    client = Client(folder)
    measured = evaluate_skills(client, per_kind=per_kind, splits=ONE_FACTOR_SPLITS, kinds=kinds,
                               seed=settings["seed"], max_tokens=settings["max_tokens"], batch=settings["batch"])
    greedy = {split: pooled((committed if split in OUTER_SPLITS else measured)[split]["kinds"], kinds)
              for split in FACTOR_SPLITS}
    copy = {split: argument_copy(client.model.eval(), client.tokenizer,
                                 make_skills(ARGUMENT_CONVERSATIONS, split=split, seed=ARGUMENT_SEED,
                                             kinds=list(TOOL_CALLING_KINDS)))["in_prompt"]
            for split in FACTOR_SPLITS}
    return {"kinds": kinds, "greedy": greedy, "measured_by_kind": {s: measured[s]["kinds"] for s in measured},
            "argument_copy": copy, "seconds": round(time.perf_counter() - started, 1)}


def print_table(result: dict) -> None:
    print(f"{'split':28s} " + " ".join(f"{s:>18s}" for s in SCORES) + "   copy: all / first token")
    for split in FACTOR_SPLITS:
        greedy, copy = result["greedy"][split], result["argument_copy"][split]
        print(f"{split:28s} " + " ".join(f"{greedy[s]:18.2f}" for s in SCORES)
              + f"   {copy['right']:.2f} / {copy['first_token']:.2f} (n {copy['n']})")


def show(model: str, kind: str, n: int) -> None:
    """The first ``n`` conversations of ``kind``, with only the values new and with the phrasings new:
    what was asked, the call that fits and the call the model wrote (greedy, one at a time)."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    client = Client(model_folder(model))
    for split in ("unseen_values", "unseen_phrasings"):
        for spec in make_skills(n, split=split, seed=settings["seed"], kinds=[kind]):
            transcript, _ = run_one(client, spec, max_tokens=settings["max_tokens"])
            written = [(call["name"], call["input"]) for call in calls_in(transcript)][:1]
            wanted = spec.expected.calls[:1]
            print(f"{split} | {spec.messages[0]['content']} | wanted {wanted} | wrote {written} | "
                  f"exact {args_exact(spec, transcript)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="chat", help="a shipped model's name, or a folder with evals.json")
    parser.add_argument("--per-kind", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    parser.add_argument("--show", metavar="KIND", help="instead, print a few conversations of this kind")
    parser.add_argument("--n", type=int, default=6, help="conversations per split for --show")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.show:
        show(args.model, args.show, args.n)
        return
    result = measure(args.model, args.per_kind)
    print_table(result)
    command = "python data/experiments/held_out_factors/measure.py " + " ".join(sys.argv[1:])
    atomic_write(args.out, json.dumps({"command": command, "model": args.model, "per_kind": args.per_kind,
                                       "argument_conversations": ARGUMENT_CONVERSATIONS, **result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
