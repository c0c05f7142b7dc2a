"""Side by side: the scores of several evals.json reports, per split, and per kind on one split.

    python data/experiments/dpo_positive/evals_table.py shipped=data/models/chat/evals.json \
        no_dpo=data/experiments/dpo_positive/no_dpo/evals.json [NAME=REPORT ...] [--split SPLIT]

Every report must score the same conversations (the recipe's evals stage with the same config), so
a difference is the models' alone. Each score is a fraction of n conversations; ``--se`` adds the
binomial standard error of the difference from the first report, ``sqrt(p1 q1 / n + p2 q2 / n)``
(unpaired, so on the generous side: the two models answer the same conversations).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

SCORES = ("tool_call_valid", "right_tool", "args_exact", "answer_from_result", "ends_turn", "no_invention", "memory",
          "greets_by_name")  # greets_by_name: reports written before it was scored lack it ("-")
SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")
KIND_SCORES = ("right_tool", "args_exact")


def difference_se(first: float, second: float, n: int) -> float:
    """The binomial standard error of the difference of two fractions of n."""
    return math.sqrt((first * (1 - first) + second * (1 - second)) / n)


def split_table(reports: dict[str, dict], split: str, with_se: bool = False) -> list[str]:
    """Markdown rows: one per score some report has, one column per report (n in brackets)."""
    names = list(reports)
    rows = [f"| {split} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for score in (s for s in SCORES if any(s in reports[name][split] for name in names)):
        cells = []
        for name in names:
            figures = reports[name][split]
            if score not in figures:
                cells.append("-")
                continue
            value, n = figures[score], figures[f"n_{score}"]
            cell = f"{value:.2f} ({n})"
            first = reports[names[0]][split]
            if with_se and name != names[0] and score in first:
                cell += f" ±{difference_se(first[score], value, n):.2f}"
            cells.append(cell)
        rows.append(f"| {score} | " + " | ".join(cells) + " |")
    return rows


def kind_table(reports: dict[str, dict], split: str) -> list[str]:
    """Markdown rows: right tool / args exact per kind, one column per report."""
    names = list(reports)
    kinds = [k for k in reports[names[0]][split]["kinds"] if "args_exact" in reports[names[0]][split]["kinds"][k]]
    rows = [f"| kind ({split}) | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for kind in kinds:
        cells = [" / ".join(f"{reports[name][split]['kinds'][kind][s]:.2f}" for s in KIND_SCORES) for name in names]
        rows.append(f"| {kind} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", metavar="NAME=REPORT")
    parser.add_argument("--split", default="unseen_phrasings_and_tools", choices=SPLITS,
                        help="the split whose per-kind right_tool / args_exact are printed")
    parser.add_argument("--se", action="store_true", help="the standard error of each difference from the first")
    args = parser.parse_args()
    reports = {}
    for item in args.reports:
        name, sep, path = item.partition("=")
        if not sep:
            parser.error(f"{item!r}: name each report, NAME=PATH")
        if not Path(path).is_file():
            parser.error(f"{path}: no such report (an evals stage writes evals.json when it ends)")
        reports[name] = json.loads(Path(path).read_text(encoding="utf-8"))
    for split in SPLITS:
        print("\n".join(split_table(reports, split, args.se)), end="\n\n")
    print("\n".join(kind_table(reports, args.split)))


if __name__ == "__main__":
    main()
