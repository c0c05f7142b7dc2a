"""Which models learn to copy? Depth against width on copy practice alone, and a grown model.

A tool call copies (a name from the tool list, a city from the question) and so does an answer
(a value from the result). The circuit that does it, an *induction head*, forms in a sudden
"phase change" after a plateau (Olsson et al., 2022). This experiment measures how long the
plateau lasts for models of different depth and width, all trained the same way: 16 copy rows
of 128 tokens per step (random spans, each said twice; only the second saying is scored, so only
copying lowers the loss: ``llmkit.training.data.repeated_spans``), AdamW at a constant 1e-3,
copy accuracy logged every 50 steps (``llmkit.training.train.copy_accuracy``). It is the
recipe's ``copy_warmup`` config (``data/models/recipe/copy_warmup.json``) with the model's shape
and the step count changed. The last row is the recipe's answer: a 2-layer model that has
practised copying, grown to 6 layers (``llmkit.model.grow``: the new blocks start as identities).

    python data/experiments/copy_circuit/run.py            # every row (about 75 minutes on 2 cores)
    python data/experiments/copy_circuit/run.py --quick    # 2 small rows, 100 steps (about 20 s)

Each run trains under ``--work`` (default ``runs/experiments/copy_circuit``, outside git) and
resumes from its checkpoint when interrupted; a finished run is not trained again. The table and
the curves go to ``results.json`` beside this script (``--quick``: under ``--work``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from llmkit.files import atomic_write  # noqa: E402
from llmkit.training import TrainConfig, read_log, train  # noqa: E402

HERE = Path(__file__).resolve().parent
RECIPE_CONFIG = REPO / "data" / "models" / "recipe" / "copy_warmup.json"

# (name, layers, width, heads, steps, grown from): the same training for every row
RUNS = [
    ("2x128", 2, 128, 2, 600, None),
    ("4x128", 4, 128, 2, 600, None),
    ("6x128", 6, 128, 2, 600, None),
    ("2x320", 2, 320, 5, 600, None),
    ("6x320", 6, 320, 5, 600, None),
    ("2x320_long", 2, 320, 5, 1200, None),
    ("6x320_grown", 6, 320, 5, 300, "2x320_long"),
]
QUICK_RUNS = [("2x64", 2, 64, 2, 100, None), ("4x64", 4, 64, 2, 100, None)]


def run_config(name: str, layers: int, width: int, heads: int, steps: int, grown_from: str | None,
               work: Path, tokenizer: str) -> TrainConfig:
    """The recipe's copy_warmup config with this row's shape, steps and output folder (checked like any config)."""
    model = {**TrainConfig.from_json(RECIPE_CONFIG).model, "n_layers": layers, "d_model": width, "n_heads": heads,
             "n_kv_heads": heads}
    return TrainConfig.from_json(
        RECIPE_CONFIG, model=model, max_steps=steps, eval_every=50, checkpoint_every=50, log_every=25,
        tokenizer=tokenizer, heldout_corpus=str(heldout_slice(work)), out_dir=str(work / name),
        grow_from=str(work / grown_from / "model") if grown_from else None, device="cpu")


def heldout_slice(work: Path) -> Path:
    """20,000 characters of held-out Shakespeare: the logged bits/byte is not what is studied here."""
    path = work / "heldout_slice.txt"
    if not path.is_file():
        work.mkdir(parents=True, exist_ok=True)
        text = (REPO / "data" / "corpus" / "heldout.txt").read_text(encoding="utf-8")[:20_000]
        atomic_write(path, text)
    return path


def train_row(cfg: TrainConfig) -> float:
    """Train one row (resuming, or skipping when finished); the seconds it took this time."""
    out = Path(cfg.out_dir)
    if (out / "model").is_dir():
        return 0.0
    start = time.perf_counter()
    train(cfg, resume=(out / "checkpoint").is_dir())
    return time.perf_counter() - start


def summary(cfg: TrainConfig, seconds: float) -> dict:
    """The row's curve and its headline: the first step at which copy accuracy passed 0.5."""
    log = read_log(Path(cfg.out_dir) / "train_log.jsonl")
    evals = [r for r in log if r["kind"] == "eval"]
    train_loss = {r["step"]: r["loss"] for r in log if r["kind"] == "train"}
    formed = next((r["step"] for r in evals if r["copy_accuracy"] >= 0.5), None)
    return {"layers": cfg.model["n_layers"], "width": cfg.model["d_model"], "heads": cfg.model["n_heads"],
            "steps": cfg.max_steps, "grown_from": cfg.grow_from and Path(cfg.grow_from).parent.name,
            "final_loss": train_loss[max(train_loss)], "final_copy_accuracy": evals[-1]["copy_accuracy"],
            "copy_above_half_at": formed, "seconds_this_run": round(seconds, 1),
            "curve": [{"step": r["step"], "copy_accuracy": r["copy_accuracy"], "loss": train_loss.get(r["step"])}
                      for r in evals]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two small rows, 100 steps each")
    parser.add_argument("--work", default="runs/experiments/copy_circuit", help="where runs train (outside git)")
    parser.add_argument("--tokenizer", default="data/models/base/tokenizer.json",
                        help="the copy rows use its ordinary ids (4,080 for the course tokenizer)")
    args = parser.parse_args(argv)
    work = Path(args.work) / ("quick" if args.quick else "full")
    results = {}
    for row in QUICK_RUNS if args.quick else RUNS:
        cfg = run_config(*row, work=work, tokenizer=args.tokenizer)
        seconds = train_row(cfg)
        results[row[0]] = summary(cfg, seconds)
        print(f"{row[0]:<12} loss {results[row[0]]['final_loss']:.2f}  copy accuracy "
              f"{results[row[0]]['final_copy_accuracy']:.2f}  above 0.5 at step {results[row[0]]['copy_above_half_at']}",
              flush=True)
    out = (work / "results.json") if args.quick else (HERE / "results.json")
    atomic_write(out, json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
