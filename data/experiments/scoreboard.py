"""Every skills or chat model measured in data/experiments/, on one split, beside issue 13's targets.

Each experiment stores its greedy evals in its own file: `word_base/compare.py`'s `results.json`
(a model per name), `value_copy`'s (a decoding mode per name), and the recipe's `evals` stage
(`evals.json`, 100 conversations per kind). This script reads them all, adds the shipped chat
model's `data/models/chat/evals.json`, and prints one row per measured model, so the whole search
can be read at once: which change moved which score, and how far the best of them is from the target.

    python data/experiments/scoreboard.py                      # unseen_phrasings_and_tools, a table
    python data/experiments/scoreboard.py --split seen --json  # another split, as JSON

It measures nothing itself: each row is the figure its own experiment recorded. The teacher-forced
probes in `done.json` (16 greedy conversations per split) are left out; they are too few to compare.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from llmkit.course.skills import EVAL_SPLITS as SPLITS

EXPERIMENTS = Path(__file__).resolve().parent
SHIPPED_CHAT = EXPERIMENTS.parent / "models" / "chat" / "evals.json"

# Issue 13's targets on the unseen_phrasings_and_tools split.
TARGETS = {
    "tool_call_valid": 0.98,
    "right_tool": 0.95,
    "args_exact": 0.90,
    "answer_from_result": 0.90,
    "memory": 0.90,
    "no_invention": 0.90,
    "ends_turn": 0.98,
}


def is_evals(record: object) -> bool:
    """A record of the skill evals: for every split, the scores over all kinds and each kind's own.
    (`own_tools` scores one kind, a learner's own tool, the same way; it is not the evals' mix.)"""
    return isinstance(record, dict) and all(
        isinstance(record.get(split), dict) and {"args_exact", "kinds"} <= set(record[split]) for split in SPLITS)


def evals_in(record: object, label: str) -> list[tuple[str, dict]]:
    """Every evals record inside a JSON value, each labelled by the keys that lead to it
    (a model's or a mode's name; the keys `models`, `modes` and `evals` say nothing and are dropped)."""
    if is_evals(record):
        return [(label, record)]
    if not isinstance(record, dict):
        return []
    found = []
    for key, value in record.items():
        inner = label if key in ("models", "modes", "evals") else f"{label}:{key}"
        found += evals_in(value, inner)
    return found


def measured_models(root: Path = EXPERIMENTS) -> list[tuple[str, dict]]:
    """(label, evals) for the shipped chat model and every model an experiment measured, in folder order."""
    rows = [("data/models/chat (shipped)", json.loads(SHIPPED_CHAT.read_text()))]
    for path in sorted(root.rglob("*.json")):
        if path.name == "done.json":
            continue  # a stage's own summary: its evals are also in evals.json, its probe is too small
        label = str(path.relative_to(root).with_suffix(""))
        rows += evals_in(json.loads(path.read_text()), label)
    return rows


def row(label: str, evals: dict, split: str) -> dict:
    """One model's scores on a split and how many conversations decided each."""
    scores = evals[split]
    return {"model": label, "conversations": scores.get("n_right_tool"),
            **{name: scores.get(name) for name in TARGETS}}


def best(rows: list[dict]) -> dict:
    """The highest figure any model reached on each score."""
    return {name: max((r[name] for r in rows if r[name] is not None), default=None) for name in TARGETS}


def targets_met(scores: dict) -> list[str]:
    """The scores that reach issue 13's target (the targets are set for unseen_phrasings_and_tools)."""
    return [name for name, target in TARGETS.items() if scores[name] is not None and scores[name] >= target]


def table(rows: list[dict], split: str) -> str:
    """A Markdown table: a row per model (and, on the targets' split, how many targets it meets),
    then the best of them and the targets."""
    on_target_split = split == "unseen_phrasings_and_tools"
    cell = lambda value: "-" if value is None else f"{value:.2f}"
    line = lambda *cells: "| " + " | ".join(c if isinstance(c, str) else cell(c) for c in cells) + " |"
    met = (lambda *values: values) if on_target_split else (lambda *values: ())
    lines = [line("model", "n", *TARGETS, *met("met")), "|---|" + "---:|" * (len(TARGETS) + 1 + on_target_split)]
    for r in rows:
        lines.append(line(r["model"], str(r["conversations"]), *(r[n] for n in TARGETS), *met(str(len(targets_met(r))))))
    lines.append(line("**best of these**", "", *best(rows).values(), *met("")))
    if on_target_split:
        lines.append(line("**issue 13's target**", "", *TARGETS.values(), "7"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=SPLITS, default="unseen_phrasings_and_tools")
    parser.add_argument("--json", action="store_true", help="print the rows, the best and the targets as JSON")
    args = parser.parse_args()
    rows = [row(label, evals, args.split) for label, evals in measured_models()]
    if args.json:
        print(json.dumps({"split": args.split, "rows": rows, "best": best(rows), "targets": TARGETS}, indent=1))
    else:
        print(table(rows, args.split))


if __name__ == "__main__":
    main()
