"""The field-order experiment: does writing the evidence before the conclusion help a small model?

Two short fine-tunes of the same base, on the same questions ("Add up 3, 7, 2, 9."), answered
through one tool whose input holds the running sums and the total; they differ only in the order
of those two fields (``llmkit.course.field_order``). Each then answers held-out questions greedily
under the schema constraint, and only the total is scored. Writes ``results.json`` beside this file::

    {"n": ..., "evidence_first": ..., "conclusion_first": ..., "effect": ..., "runs": [...], "details": {...}}

Each figure is the mean over several fine-tuning seeds (``runs`` has each seed's own): one seed per
variant can land far from another.

    python data/experiments/field_order/build.py --threads 2     # the full run: 7-10 numbers, 600 steps (README.md)
    python data/experiments/field_order/build.py --threads 2 --numbers 3 6 --steps 300 \
        --out data/experiments/field_order/results_3_to_6_300_steps.json  # shorter lists, shorter training
    python data/experiments/field_order/build.py --quick         # about a minute, into runs/field_order/quick/
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(REPO))

from llmkit.course.field_order import FieldOrderSettings, combine_runs, run_field_order  # noqa: E402
from llmkit.files import atomic_write  # noqa: E402

RESULTS = HERE / "results.json"
FULL = {"steps": 600, "heldout": 200, "numbers": [7, 10], "seeds": [1337, 2, 3]}
QUICK = {"steps": 20, "heldout": 12, "numbers": [3, 6], "seeds": [1337]}  # a look at the plumbing, not at the effect


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="base", help="the model both variants start from: 'base' or a model folder")
    parser.add_argument("--steps", type=int,
                        help=f"fine-tuning steps per variant (default {FULL['steps']}; --quick: {QUICK['steps']})")
    parser.add_argument("--heldout", type=int, help="held-out questions per variant (default 200; --quick: 12)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", help=f"fine-tuning seeds, one run of both variants each "
                                                             f"(default {' '.join(map(str, FULL['seeds']))}; --quick: 1337)")
    parser.add_argument("--numbers", type=int, nargs=2, metavar=("FEWEST", "MOST"),
                        help=f"how many numbers a question adds up (default {FULL['numbers'][0]} {FULL['numbers'][1]})")
    parser.add_argument("--out", help=f"the results file (default {RESULTS.relative_to(REPO)}; "
                                      "--quick: runs/field_order/quick/results.json, so the shipped figures stay)")
    parser.add_argument("--runs", help="where each seed's two fine-tuned models and its own results go, in seed<S>/ "
                                       "(default runs/field_order/full, --quick: runs/field_order/quick; outside git)")
    parser.add_argument("--combine", nargs="+", metavar="RESULTS",
                        help="train nothing: combine these runs' own results files (seed<S>/results.json) into --out")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda', ...")
    parser.add_argument("--quick", action="store_true", help="a short run that checks everything works")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    runs = Path(args.runs) if args.runs else REPO / "runs" / "field_order" / ("quick" if args.quick else "full")
    defaults = QUICK if args.quick else FULL
    out = Path(args.out) if args.out else (runs / "results.json" if args.quick else RESULTS)
    started = time.perf_counter()
    if args.combine:
        each = [json.loads(Path(path).read_text(encoding="utf-8")) for path in args.combine]
    else:
        each = []
        for seed in args.seeds or defaults["seeds"]:
            settings = FieldOrderSettings(base=args.base, steps=args.steps or defaults["steps"],
                                          heldout=args.heldout or defaults["heldout"], batch_size=args.batch_size,
                                          count_range=tuple(args.numbers or defaults["numbers"]), seed=seed,
                                          runs_dir=str(runs / f"seed{seed}"), threads=args.threads, device=args.device)
            run = run_field_order(settings)
            atomic_write(runs / f"seed{seed}" / "results.json", json.dumps(run, indent=1) + "\n")
            print(f"seed {seed}: evidence first {run['evidence_first']:.3f}, conclusion first "
                  f"{run['conclusion_first']:.3f}", flush=True)
            each.append(run)
    results = combine_runs(each)
    results["command"] = " ".join(["python data/experiments/field_order/build.py", *(argv or sys.argv[1:])])
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(results, indent=1) + "\n")
    print(f"{results['n']} held-out questions x {len(each)} seed(s): evidence first {results['evidence_first']:.3f} "
          f"right, conclusion first {results['conclusion_first']:.3f} (guessing the commonest total: "
          f"{results['guess_most_common_total']:.3f}); {(time.perf_counter() - started) / 60:.1f} min -> {out}")
    return results


if __name__ == "__main__":
    main()
