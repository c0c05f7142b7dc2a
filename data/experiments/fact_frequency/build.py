"""The fact-frequency experiment: recall of a fact against how often training stated it.

Trains a small model from scratch on Shakespeare plus register entries about invented people,
each fact stated 1, 2, 4, ..., 512 times, then asks every fact with a held-out question opening
(``llmkit.course.fact_frequency`` has the design). Writes ``results.json`` beside this file:
``{"bins": [{"mentions", "n", "recall", "fluent_when_wrong", ...}], "example": ..., "answers": [...]}``.

    python data/experiments/fact_frequency/build.py              # the full run (see README.md for its time)
    python data/experiments/fact_frequency/build.py --quick      # about a minute: a tiny model, the pipeline only
                                                                 # (writes runs/fact_frequency_quick/results.json)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from llmkit.course.fact_frequency import run_experiment  # noqa: E402
from llmkit.files import atomic_write  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results.json"
FULL_STEPS, QUICK_STEPS = 400, 200


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help=f"training steps (default {FULL_STEPS}, {QUICK_STEPS} with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model, one person per bin, a few steps: checks the pipeline, not the claim")
    parser.add_argument("--out", default=None,
                        help="where to write the results (default: results.json here; with --quick, in the run folder)")
    parser.add_argument("--run-dir", default=None,
                        help="folder for the corpus, checkpoint and model (default runs/fact_frequency[_quick])")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps (default auto)")
    args = parser.parse_args(argv)
    steps = args.steps or (QUICK_STEPS if args.quick else FULL_STEPS)
    run_dir = Path(args.run_dir) if args.run_dir else REPO / "runs" / f"fact_frequency{'_quick' if args.quick else ''}"
    out = Path(args.out) if args.out else run_dir / "results.json" if args.quick else RESULTS

    started = time.perf_counter()
    results = run_experiment(run_dir, steps=steps, quick=args.quick, threads=args.threads, device=args.device)
    results["wall_minutes"] = round((time.perf_counter() - started) / 60, 2)
    atomic_write(out, json.dumps(results, indent=1) + "\n")
    for row in results["bins"]:
        print(f"{row['mentions']:>4} mentions  n={row['n']:>3}  recall {row['recall']:.2f}  "
              f"fluent when wrong {row['fluent_when_wrong'] if row['fluent_when_wrong'] is not None else '-'}")
    print(f"{results['wall_minutes']} min in all ({results['train_minutes']} training); wrote {out}")
    return results


if __name__ == "__main__":
    main()
