"""The strawberry experiment, from a model that can spell: does counting need the letters written out?

Source note 002 claims: the letters of a word are recoverable from its tokens (a model can spell
it), but counting a letter *directly* fails; spelling the word out with a running count first
(reasoning tokens) or calling a ``count_letters`` tool fixes it, at a price in output tokens.

A claim about models that can spell needs a model that can. So, from a base model that copies
words (the recipe's ``pretrain_words`` stage: the shipped base after practice at copying whole
words; why: README.md):

1. **speller**: fine-tune on "Spell X." -> "x y z" for every letter token of the vocabulary and
   for words built from several tokens (corpus words, invented words, random token glue);
   ``llmkit.course.spelling``. Probe: spell the held-out words (``spelling_alone``). With
   ``--polish-steps``, more spelling steps from the speller's weights at a lower learning rate.
2. **direct / spelled / tool**: three fine-tunes *from the speller*, on the same (word, letter)
   items, one answer format each (``llmkit.course.strawberry.format_source``), a quarter of each
   batch still "Spell X." so the speller keeps its skill.
3. Score every format greedily, through ``run_agent`` on a ``Client``, on held-out real words and
   invented words (never in any training data), two letters per word, the letter drawn so that
   the true counts are spread (``balanced_letter``): accuracy and mean output tokens.

    python -m llmkit recipe data/models/recipe_words.json --stop-after pretrain_words  # its base, ~30 min
    python data/experiments/strawberry/build.py                       # the full run, ~2 h (README.md)
    python data/experiments/strawberry/build.py --quick   # about a minute; runs/experiments/strawberry_quick/

A stage whose model folder exists with the same settings is not trained again; an interrupted
one resumes from its last checkpoint (``--work``, default ``runs/experiments/strawberry``).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from llmkit.course import spelling, strawberry  # noqa: E402
from llmkit.devices import resolve_device  # noqa: E402
from llmkit.files import atomic_write  # noqa: E402
from llmkit.model.weights import TOKENIZER_FILE, load_model, model_folder  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.tokens.tokenizer import Tokenizer  # noqa: E402
from llmkit.training.checkpoint import read_log  # noqa: E402
from llmkit.training.config import FinetuneConfig  # noqa: E402
from llmkit.training.finetune import finetune  # noqa: E402

HERE = Path(__file__).resolve().parent
# the full run takes about two hours on two CPU cores (and its base half an hour more): the speller, the
# prerequisite, learns slowly (2,500 steps spelled 0.81 of the held-out words, 5,000 0.88, 5,000 and a
# 2,500-step polish 0.92), and the tool format's conversations are long (README.md)
FULL = {"steps": 5000, "polish_steps": 2500, "batch_size": 32, "format_steps": 1200, "format_batch_size": 16,
        "real": 24, "invented": 24, "per_word": 2}
QUICK = {"steps": 8, "polish_steps": 4, "batch_size": 4, "format_steps": 4, "format_batch_size": 4,
         "real": 2, "invented": 2, "per_word": 1}
TRAINING = ("steps", "polish_steps", "batch_size", "format_steps", "format_batch_size")
SPELLING_SHARE = 0.25  # of every format batch: "Spell X." conversations, so the skill is kept
SPELLER_LR, FORMAT_LR = 1.5e-3, 1e-3
# the speller's polish: a second, lower cosine from the speller's weights on fresh conversations (a warm
# restart), for when the first schedule ended with the held-out loss still falling
POLISH_LR, POLISH_SEED = SPELLER_LR / 3, 1338
PROBE_EVERY = 4  # the probe asks every 4th held-out word (every 8th question) at each held-out report
# the full run starts from the recipe's base that practised copying whole words (README.md: from the
# shipped base, the spelling inside an answer began at the wrong word); --quick from the shipped base
WORD_COPYING_BASE = "runs/recipe_words/pretrain_words/shipped"
WORD_COPYING_RECIPE = "python -m llmkit recipe data/models/recipe_words.json --stop-after pretrain_words"


def base_folder(base: str) -> str | Path:
    """The model to start from: a shipped model's name as it is, the word-copying base found in
    this checkout (a clear error if it was not built), any other folder as given."""
    if base != WORD_COPYING_BASE:
        return base
    folder = REPO / WORD_COPYING_BASE
    if not (folder / "model.safetensors").is_file():
        raise SystemExit(f"the base that copies words is not built yet: run `{WORD_COPYING_RECIPE}` "
                         f"(about 30 minutes on 2 cores), or pass --base base to start from the shipped base")
    return folder


def stage_config(name: str, base: str | Path, steps: int, batch_size: int, learning_rate: float,
                 args: argparse.Namespace, seed: int = 1337) -> FinetuneConfig:
    """The fine-tuning settings of one stage (cosine schedule, a held-out loss four times per run)."""
    return FinetuneConfig(base_model=str(base), out_dir=str(Path(args.work) / name), batch_size=batch_size,
                          max_steps=steps, learning_rate=learning_rate, min_learning_rate=learning_rate / 10,
                          warmup_steps=max(1, steps // 20), eval_every=max(1, steps // 4),
                          checkpoint_every=max(1, steps // 4), heldout_examples=32, threads=args.threads,
                          device=args.device, seed=seed, log_every=max(1, steps // 20))


def probe(fmt: str, questions: list[tuple[str, str | None]], tokenizer, spell_first: bool = False):
    """A few held-out questions asked greedily at every held-out report of a stage: the log's
    ``probe`` shows *when* the skill appears (a loss falls long before it does)."""
    def measure(model) -> dict:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            rows = [strawberry.score_item(model, tokenizer, fmt, word, letter, spell_first=spell_first)
                    for word, letter in questions]
        model.train(was_training)
        figures = {"accuracy": strawberry.accuracy(rows), "questions": len(rows)}
        if fmt == "spell":
            figures["letters_right"] = share(rows, "letters_right")
        return figures
    return measure


def train(cfg: FinetuneConfig, source, base_changed: bool, measure=None) -> tuple[Path, float]:
    """Run one stage; ``(model folder, seconds)``.

    Skipped (0 seconds) when its model is there with the same settings and the model it starts
    from did not change (``base_changed``); resumed from its checkpoint when one with the same
    settings is there.
    """
    folder = Path(cfg.out_dir)
    saved = folder / "sft_config.json"
    same = saved.is_file() and json.loads(saved.read_text(encoding="utf-8")) == json.loads(json.dumps(cfg.to_dict()))
    if same and not base_changed and (folder / "model" / "model.safetensors").is_file():
        print(f"{folder.name}: done earlier with the same settings, not trained again", flush=True)
        return folder / "model", 0.0
    resume = same and not base_changed and (folder / "checkpoint").exists()
    if not resume:  # a fresh start leaves nothing of an older run behind (no stale model to skip to later)
        shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    finetune("sft", cfg, source, resume=resume, probe=measure)
    return folder / "model", round(time.perf_counter() - started, 1)


def score(model_dir: Path, fmt: str, questions: list[tuple[str, str | None]], device: str,
          spell_first: bool = False) -> tuple[list[dict], float]:
    """Every question asked of the model in ``model_dir``, greedily; ``(rows, seconds)``."""
    model, tokenizer = load_model(model_dir, device=resolve_device(device))
    model.eval()
    started = time.perf_counter()
    with torch.no_grad():
        rows = [strawberry.score_item(model, tokenizer, fmt, word, letter, spell_first=spell_first)
                for word, letter in tqdm(questions, desc=f"scoring {fmt}", unit="question")]
    return rows, round(time.perf_counter() - started, 1)


def share(rows: list[dict], key: str) -> float:
    return round(sum(r[key] for r in rows) / len(rows), 3)


def summary(rows: dict[str, list[dict]], real: set[str], counts: list[int]) -> dict:
    """The figures of results.json, from the scored rows of every format run so far."""
    name = {"spell": "spelling_alone"}

    def accuracies(keep) -> dict:
        return {name.get(f, f): strawberry.accuracy([r for r in rs if keep(r)]) for f, rs in rows.items()}

    out = {"n": len(counts), "most_common_answer_baseline": strawberry.most_common_answer_share(counts),
           "heldout": accuracies(lambda r: True),
           "heldout_real_words": accuracies(lambda r: r["word"] in real),
           "heldout_invented_words": accuracies(lambda r: r["word"] not in real),
           "mean_output_tokens": {name.get(f, f): round(sum(r["output_tokens"] for r in rs) / len(rs), 1)
                                  for f, rs in rows.items()}}
    for fmt, key, figure in (("spell", "letters_right", "spelling_letters_right"),
                             ("spelled", "spelled_right", "spelled_the_word_right"),
                             ("tool", "called_tool_right", "called_the_tool_right")):
        if fmt in rows:
            out[figure] = share(rows[fmt], key)
    return out


def stage_name(fmt: str, spell_first: bool) -> str:
    """The folder of a format's stage: the spelled format trained with ``--spell-first`` has other
    data, so it gets a folder of its own (the others are the same either way, and are reused)."""
    return f"{fmt}_spell_first" if spell_first and fmt == "spelled" else fmt


def stage_logs(work: Path, rows: dict, spell_first: bool = False, polished: bool = False) -> dict[str, list[dict]]:
    """The training log of every stage this run used, ``{stage: [record, ...]}``."""
    spellers = ("speller", "speller_polish") if polished else ("speller",)
    logs = {}
    for stage in (*spellers, *[f for f in strawberry.COUNT_FORMATS if f in rows]):
        log = work / stage_name(stage, spell_first) / "train_log.jsonl"
        logs[stage] = read_log(log) if log.is_file() else []
    return logs


def curves(logs: dict[str, list[dict]]) -> dict:
    """Each stage's probe figures at every held-out report, ``{stage: [{"step": ..., "accuracy": ...}, ...]}``."""
    return {stage: [{"step": r["step"], **r["probe"]} for r in records if r.get("kind") == "eval" and "probe" in r]
            for stage, records in logs.items()}


def stage_seconds(logs: dict[str, list[dict]]) -> dict[str, float]:
    """Each stage's training time at its usual pace: the median of its log's seconds per step, times its
    steps. From the log, so a stage this run reused (``train_seconds`` 0) still counts; a median, because
    a stage that was paused or shared the cores has a few slow log lines. Held-out reports not included."""
    out = {}
    for stage, records in logs.items():
        lines, last = [], 0
        for r in (r for r in records if r.get("kind") == "train"):
            lines.append((r["seconds"] / (r["step"] - last), r["step"] - last))
            last = r["step"]
        out[stage] = round(statistics.median(pace for pace, _ in lines) * sum(n for _, n in lines), 1) if lines else 0.0
    return out


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help=f"the model to start from: a shipped model ('base') or a model folder "
                        f"(default {WORD_COPYING_BASE}, made by `{WORD_COPYING_RECIPE}`; 'base' with --quick)")
    parser.add_argument("--steps", type=int, help=f"spelling-stage steps (default {FULL['steps']})")
    parser.add_argument("--polish-steps", type=int, help=f"then this many more spelling steps from the speller at "
                        f"a third of its learning rate, on fresh conversations (default {FULL['polish_steps']}; 0: none)")
    parser.add_argument("--batch-size", type=int, help=f"spelling-stage batch (default {FULL['batch_size']})")
    parser.add_argument("--format-steps", type=int, help=f"steps per format (default {FULL['format_steps']})")
    parser.add_argument("--format-batch-size", type=int, help=f"format batch (default {FULL['format_batch_size']})")
    parser.add_argument("--out", help="the results file (default: results.json beside this script; with --quick, "
                        "in the --work folder, so a quick run never overwrites the measured results)")
    parser.add_argument("--work", help="where the stages' models go (default runs/experiments/strawberry, "
                        "or runs/experiments/strawberry_quick with --quick)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--spell-first", action="store_true", help="the spelled format writes the plain spelling "
                        "on a line of its own, then the running count (strawberry.counting_steps); README: tried, "
                        "not better")
    parser.add_argument("--quick", action="store_true", help="a tiny run (about a minute): it works, measures nothing")
    args = parser.parse_args(argv)
    args.preset = QUICK if args.quick else FULL
    args.base = args.base or ("base" if args.quick else WORD_COPYING_BASE)
    args.work = args.work or str(REPO / "runs" / "experiments" / ("strawberry_quick" if args.quick else "strawberry"))
    args.out = args.out or (str(Path(args.work) / "results.json") if args.quick else str(HERE / "results.json"))
    for key in TRAINING:
        if getattr(args, key) is None:
            setattr(args, key, args.preset[key])
    return args


def main(argv: list[str] | None = None) -> dict:
    args = arguments(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = base_folder(args.base)
    tokenizer = Tokenizer.load(model_folder(base) / TOKENIZER_FILE)
    words = strawberry.heldout_words(args.preset["real"], args.preset["invented"])
    held_out = sorted(set(words["real"]) | set(words["invented"]))
    sampler = spelling.WordSampler(tokenizer, spelling.token_contexts(tokenizer),
                                   spelling.corpus_words(data_path("corpus", "train.txt")), set(held_out))
    questions = strawberry.count_items(words["real"] + words["invented"], args.preset["per_word"])
    counts = [strawberry.count_letters(word, letter) for word, letter in questions]
    results = {"claim": "spelling succeeds, direct counting fails, spelled-out counting and the tool fix it",
               "command": " ".join(["python data/experiments/strawberry/build.py", *(argv or sys.argv[1:])]),
               "base": args.base, "vocabulary_coverage": round(spelling.coverage(tokenizer, sampler), 3),
               "settings": {**args.preset, **{k: getattr(args, k) for k in TRAINING}, "spelling_share": SPELLING_SHARE,
                            "learning_rates": {"speller": SPELLER_LR, "formats": FORMAT_LR,
                                               **({"speller_polish": POLISH_LR} if args.polish_steps else {})},
                            **({"spell_first": True} if args.spell_first else {})},
               "heldout_words": words, "train_seconds": {}, "score_seconds": {}}
    rows: dict[str, list[dict]] = {}

    def save() -> None:
        logs = stage_logs(Path(args.work), rows, args.spell_first, args.polish_steps > 0)
        results.update(summary(rows, set(words["real"]), counts), stage_seconds=stage_seconds(logs),
                       curves=curves(logs), items=rows)
        atomic_write(args.out, json.dumps(results, indent=1, ensure_ascii=False) + "\n")

    spelling_probe = probe("spell", [(w, None) for w in held_out[::PROBE_EVERY]], tokenizer)
    cfg = stage_config("speller", base, args.steps, args.batch_size, SPELLER_LR, args)
    speller, seconds = train(cfg, spelling.spelling_source(sampler, held_out), base_changed=False,
                             measure=spelling_probe)
    results["train_seconds"]["speller"] = seconds
    if args.polish_steps:
        cfg = stage_config("speller_polish", speller, args.polish_steps, args.batch_size, POLISH_LR, args,
                           seed=POLISH_SEED)
        speller, results["train_seconds"]["speller_polish"] = train(
            cfg, spelling.spelling_source(sampler, held_out), base_changed=seconds > 0, measure=spelling_probe)
        seconds += results["train_seconds"]["speller_polish"]
    rows["spell"], results["score_seconds"]["spell"] = score(speller, "spell", [(w, None) for w in held_out],
                                                             args.device)
    save()
    for fmt in strawberry.COUNT_FORMATS:
        cfg = stage_config(stage_name(fmt, args.spell_first), speller, args.format_steps, args.format_batch_size,
                           FORMAT_LR, args)
        source = strawberry.format_source(fmt, sampler, questions, SPELLING_SHARE, spell_first=args.spell_first)
        model_dir, results["train_seconds"][fmt] = train(cfg, source, base_changed=seconds > 0,
                                                         measure=probe(fmt, questions[::PROBE_EVERY * 2], tokenizer,
                                                                       args.spell_first))
        rows[fmt], results["score_seconds"][fmt] = score(model_dir, fmt, questions, args.device, args.spell_first)
        save()
        print(f"{fmt:>8}: {results['heldout'][fmt]} right, {results['mean_output_tokens'][fmt]} output tokens "
              f"(spelling alone {results['heldout']['spelling_alone']})", flush=True)
    return results


if __name__ == "__main__":
    main()
