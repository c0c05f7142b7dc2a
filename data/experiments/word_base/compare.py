"""Two chat checkpoints of the same stage side by side: held-out argument copying and the skill evals.

    python data/experiments/word_base/compare.py \
        --model shipped=data/models/skills --model words=RUN/sft_skills/shipped [--per-kind 50] [--threads 2]

Made to ask one question: does ``sft_skills`` learn to copy arguments better from the base that
copies across a space (``recipe_words.json``: ``pretrain_words``) than from the shipped base? Both
runs use the same data and seed, so any checkpoint pair of one stage can be compared. For each
model (a folder with config.json, model.safetensors, tokenizer.json) it measures, on the three
held-out splits:

* ``argument_copy`` (teacher-forced, 100 conversations of the tool-calling kinds, seed 11): a
  value all right, its first token right (the model found the word to copy), and its later tokens
  right once the first is given (it copied on from there);
* the skill evals, greedy through ``Client`` + ``run_agent`` with the recipe's evals settings
  (``data/models/recipe/evals.json``: batch, max_tokens, seed) but ``--per-kind`` conversations
  per kind, so two models fit in one sitting (the recipe uses 100).

It prints one table per measure and writes everything to results.json beside this script
(``--out`` elsewhere), with the command and each model's seconds. One ``--model`` alone is measured
the same way, to set beside another run's committed results (the conversations depend only on
``--per-kind`` and the recipe's evals settings).

    python data/experiments/word_base/compare.py --probe-logs \
        shipped=data/models/skills/stages/sft_skills/train_log.jsonl \
        words=data/experiments/word_base/sft_skills_words/train_log.jsonl

prints instead the skill probe that two runs logged every 100 steps (16 greedy conversations per
score, the teacher-forced scores on 40), side by side on the ``unseen_phrasings_and_tools`` split.
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
from llmkit.course.skill_scores import evaluate_skills
from llmkit.course.skills import EVAL_SPLITS, MIX, make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

ARGUMENT_CONVERSATIONS = 100
ARGUMENT_SEED = 11
PROBE_SCORES = ("right_tool", "args_exact", "copy_in_prompt")
EVAL_SCORES = ("tool_call_valid", "calls_made", "right_tool", "args_exact", "answer_from_result", "ends_turn",
               "no_invention", "memory")


def copy_scores(client: Client, conversations: int = ARGUMENT_CONVERSATIONS) -> dict[str, dict]:
    """``argument_copy``'s in-prompt values per split: the ones a model can copy token by token."""
    model = client.model.eval()
    return {split: argument_copy(model, client.tokenizer,
                                 make_skills(conversations, split=split, seed=ARGUMENT_SEED,
                                             kinds=list(TOOL_CALLING_KINDS)))["in_prompt"]
            for split in EVAL_SPLITS}


def eval_scores(client: Client, per_kind: int) -> dict[str, dict]:
    """The recipe's evals stage, greedy, at ``per_kind`` conversations per kind of the training mix."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    return evaluate_skills(client, per_kind=per_kind, splits=EVAL_SPLITS, kinds=list(MIX),
                           seed=settings["seed"], max_tokens=settings["max_tokens"], batch=settings["batch"])


def measure(folder: Path, per_kind: int, conversations: int = ARGUMENT_CONVERSATIONS) -> dict:
    """Both measures for one model folder, and the seconds they took; the model is loaded as stored
    (a recipe stage's ``shipped/`` copy is the bf16-rounded model that would ship)."""
    started = time.perf_counter()
    client = Client(folder)
    result = {"argument_copy": copy_scores(client, conversations), "evals": eval_scores(client, per_kind)}
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def print_tables(results: dict[str, dict]) -> None:
    names = list(results)
    print("argument_copy, in-prompt values: all right / first token / later tokens  (" + " | ".join(names) + ")")
    for split in EVAL_SPLITS:
        cells = [f"{r['right']:.2f} / {r['first_token']:.2f} / {r['later_tokens']:.2f} (n {r['n']})"
                 for r in (results[name]["argument_copy"][split] for name in names)]
        print(f"  {split:<28} " + " | ".join(cells))
    print("evals (" + " | ".join(names) + ")")
    for split in EVAL_SPLITS:
        print(f"  {split}")
        for score in EVAL_SCORES:
            scored = [results[name]["evals"][split] for name in names]
            cells = [f"{r.get(score, float('nan')):.2f} (n {r.get('n_' + score, 0)})" for r in scored]
            print(f"    {score:<20} " + " | ".join(cells))


def probe_rows(logs: dict[str, Path], split: str = "unseen_phrasings_and_tools") -> list[dict]:
    """One row per step that every log probed: the held-out loss and ``PROBE_SCORES`` of each run."""
    from llmkit.training.checkpoint import read_log

    probes = {name: {r["step"]: r for r in read_log(path) if "probe" in r} for name, path in logs.items()}
    steps = sorted(set.intersection(*(set(by_step) for by_step in probes.values())))
    return [{"step": step, **{name: {"heldout_loss": by_step[step]["heldout_loss"],
                                     **{score: by_step[step]["probe"][split][score] for score in PROBE_SCORES}}
                              for name, by_step in probes.items()}}
            for step in steps]


def print_probe(rows: list[dict], names: list[str]) -> None:
    print("step  " + "  ".join(f"{column} ({' / '.join(names)})" for column in ("heldout_loss", *PROBE_SCORES)))
    for row in rows:
        cells = [" / ".join(f"{row[name][column]:.2f}" for name in names) for column in ("heldout_loss", *PROBE_SCORES)]
        print(f"{row['step']:>5}  " + "  ".join(cells))


def named_paths(specs: list[str], parser) -> dict[str, str]:
    pairs = [spec.split("=", 1) for spec in specs]
    if any(len(pair) != 2 or not all(pair) for pair in pairs):
        parser.error("give each one as NAME=PATH")
    return dict(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER",
                        help="a name for the table and a model folder; give one or more")
    parser.add_argument("--probe-logs", nargs="+", metavar="NAME=LOG",
                        help="instead, print the probe the runs' train_log.jsonl recorded")
    parser.add_argument("--per-kind", type=int, default=50, help="eval conversations per kind and split")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe_logs:
        logs = named_paths(args.probe_logs, parser)
        print_probe(probe_rows({name: Path(path) for name, path in logs.items()}), list(logs))
        return
    models = named_paths(args.model, parser)
    if not models:
        parser.error("give one --model NAME=FOLDER or more (or --probe-logs)")
    results = {name: measure(Path(folder), args.per_kind) for name, folder in models.items()}
    print_tables(results)
    command = "python data/experiments/word_base/compare.py " + " ".join(sys.argv[1:])
    report = {"command": command, "per_kind": args.per_kind, "argument_conversations": ARGUMENT_CONVERSATIONS,
              "models": results}
    atomic_write(args.out, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
