"""How the course's models are made: the data each fine-tuning stage is handed, and the one recipe.

``llmkit.training`` fine-tunes on whatever examples it is handed; this module hands it the
course's. Two ways in:

**One stage** (``llmkit finetune sft|dpo --config FILE``, ``finetune_chat``): the synthetic
conversations of ``llmkit.course.conversations`` (``data="chat"``, optionally only ``kinds``,
optionally with invented entities: ``llmkit.course.entities``) or the strawberry experiment's
task sets (``data="strawberry:<format>"``), and their DPO preference pairs.

**The recipe** (``llmkit recipe data/models/recipe.json [--device cuda] [--stop-after STAGE]``,
``run_recipe``): tokenizer -> corpus -> pretraining -> SFT stages -> DPO -> evals, each stage a
kind and a JSON config (paths relative to the recipe file; runners in
``llmkit.course.recipe_stages``). A stage writes into ``<out_dir>/<stage name>/`` (under
``runs/``, outside git) its outputs, ``stage.log`` and, when training, ``train_log.jsonl`` and
checkpoints. A finished stage writes ``done.json`` with a hash of its config chained with every
earlier stage's: run the command again after an interruption and finished stages are skipped,
the interrupted one resumes from its last checkpoint, the rest run. Change a stage's config and
that stage and every later one run again.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from llmkit.course.conversation_data import Conversation
from llmkit.course.conversations import make_conversations, pick_letter
from llmkit.course.preferences import make_preferences
from llmkit.course.strawberry import strawberry_task, strawberry_tasks
from llmkit.course.entities import CopyWords, heldout_values, invent, with_fresh_entity
from llmkit.course.recipe_stages import (MODEL_KINDS, RUNNERS, SHIPPED, chain_hashes, load_recipe, stage_logger,
                                         write_json, write_text)
from llmkit.files import atomic_copy
from llmkit.training.checkpoint import read_log
from llmkit.training.config import FinetuneConfig

DATA_FORMATS = "'chat' or 'strawberry:<direct|spelled|tool|spell>'"


# ------------------------------------------------------------------------------------- one stage
@dataclass(kw_only=True)
class ChatFinetuneConfig(FinetuneConfig):
    """A ``FinetuneConfig`` plus which course examples to train on.

    ``data``: "chat" (``make_conversations``, optionally only ``kinds``) or "strawberry:<format>"
    (``strawberry_tasks``). For DPO, the preference pairs of ``make_preferences`` (``kinds``
    defaults to its PREFERENCE_KINDS).
    """

    data: str = "chat"
    kinds: list[str] | None = None
    fresh_entities: float = 0.0  # fraction of training conversations about an invented city/name/word
    varied_entities: bool = False  # invent them from syllables over the whole alphabet
    corpus_entities: bool = False  # draw half of them from the corpus's words, token by token (CopyWords)

    def problems(self) -> list[str]:
        found = super().problems()
        try:
            example_source(self.data, self.kinds, self.fresh_entities)
        except ValueError as err:
            found.append(str(err))
        return found


def example_source(data: str, kinds=None, fresh: float = 0.0, varied: bool = False,
                   fits: Callable[[Conversation], bool] | None = None,
                   lexicon: CopyWords | None = None) -> Callable[[int, str, int], list[Conversation]]:
    """``(n, split, seed) -> conversations`` for a config's ``data`` string.

    ``fresh``: the fraction of training conversations whose city, name or word is replaced by a
    freshly invented one (``with_fresh_entity``); held-out conversations are never changed.
    A longer invented name can push a conversation past the context: where ``fits`` says it does
    not fit, the original conversation is kept.
    """
    if data == "chat":
        def chat(n: int, split: str, seed: int) -> list[Conversation]:
            # kinds take turns from the first one, so a batch smaller than the list would never
            # reach its tail: start each seed (each step) at a different kind
            turns = None if kinds is None else [*kinds[seed % len(kinds):], *kinds[:seed % len(kinds)]]
            conversations = make_conversations(n, split=split, seed=seed, kinds=turns)
            if split != "train" or not fresh:
                return conversations
            rng = random.Random(f"llmkit-fresh|{seed}")
            changed = [with_fresh_entity(c, rng, varied, lexicon) if rng.random() < fresh else c for c in conversations]
            return [new if new is old or fits is None or fits(new) else old for new, old in zip(changed, conversations)]
        return chat
    if isinstance(data, str) and data.startswith("strawberry:"):
        fmt = data.split(":", 1)[1]
        strawberry_tasks(fmt, n=0)  # raises a clear error on an unknown format

        def tasks(n: int, split: str, seed: int) -> list[Conversation]:
            items = strawberry_tasks(fmt, split=split, seed=seed, n=n)
            if split != "train" or not fresh:
                return items
            rng = random.Random(f"llmkit-fresh-strawberry|{seed}")
            out = []
            for item in items:
                if rng.random() < fresh:
                    word = invent(rng, (2, 8), heldout_values(), False)
                    invented = strawberry_task(fmt, "train", word, pick_letter(rng, word), rng)
                    item = invented if fits is None or fits(invented) else item
                out.append(item)
            return out
        return tasks
    raise ValueError(f"data must be {DATA_FORMATS}, got {data!r}")


def finetune_chat(stage: str, cfg: ChatFinetuneConfig, *, resume: bool = False, stop_after: int | None = None,
                  progress: bool = True):
    """SFT or DPO on the course examples ``cfg`` names (see ``llmkit.training.finetune.finetune``)."""
    from llmkit.model.weights import TOKENIZER_FILE, model_folder
    from llmkit.tokens.tokenizer import Tokenizer
    from llmkit.training.finetune import finetune

    if stage == "dpo":
        def pairs(n: int, split: str, seed: int) -> list:
            return make_preferences(n, split=split, seed=seed, kinds=cfg.kinds)
        return finetune("dpo", cfg, pairs, resume=resume, stop_after=stop_after, progress=progress)
    folder = model_folder(cfg.base_model)
    tokenizer = Tokenizer.load(folder / TOKENIZER_FILE)
    context = json.loads((folder / "config.json").read_text(encoding="utf-8"))["context_length"]
    source = example_source(cfg.data, cfg.kinds, cfg.fresh_entities, cfg.varied_entities,
                            fits=lambda c: len(c.render(tokenizer)) <= context + 1,
                            lexicon=CopyWords.for_corpus(tokenizer) if cfg.corpus_entities else None)
    return finetune(stage, cfg, source, resume=resume, stop_after=stop_after, progress=progress)


def main(argv: list[str] | None = None) -> None:
    """``llmkit finetune sft|dpo --config FILE``: one fine-tuning stage on the course examples."""

    parser = argparse.ArgumentParser(prog="llmkit finetune",
                                     description="Fine-tune a model: SFT on conversations, or DPO on preference pairs.")
    parser.add_argument("stage", choices=["sft", "dpo"])
    parser.add_argument("--config", required=True, help="a JSON file of ChatFinetuneConfig keys")
    parser.add_argument("--resume", action="store_true", help="continue from <out_dir>/checkpoint")
    parser.add_argument("--stop-after", type=int, help="stop after this step (a checkpoint is written)")
    for key in ("device", "dtype", "out_dir", "base_model", "threads", "max_steps"):
        parser.add_argument("--" + key.replace("_", "-"), dest=key, help=f"override the config's {key}")
    args = parser.parse_args(argv)
    if not Path(args.config).is_file():
        parser.error(f"config file {args.config} does not exist")
    overrides = {k: getattr(args, k) for k in ("device", "dtype", "out_dir", "base_model") if getattr(args, k)}
    overrides.update({k: int(getattr(args, k)) for k in ("threads", "max_steps") if getattr(args, k) is not None})
    cfg = ChatFinetuneConfig.from_json(args.config, **overrides)
    started = time.perf_counter()
    finetune_chat(args.stage, cfg, resume=args.resume, stop_after=args.stop_after)
    evals = [r for r in read_log(Path(cfg.out_dir) / "train_log.jsonl") if r["kind"] == "eval"]
    if evals:
        print(json.dumps(evals[-1]), f"{(time.perf_counter() - started) / 60:.1f} min")


# ----------------------------------------------------------------------------------------- driver
def run_recipe(path: str | Path, *, device: str | None = None, stop_after: str | None = None,
               stop_at_step: int | None = None, out_dir: str | None = None, progress: bool = True,
               models_dir: str | Path | None = None) -> dict:
    """Run every stage not yet done, in order; returns ``{stage: "done" | "skipped" | "restored" | "interrupted"}``.

    ``stop_after``: stop once this stage is done. ``stop_at_step``: stop the first training stage
    that runs after that many steps, leaving a checkpoint (what an interruption leaves; for trying
    resume). ``out_dir`` overrides the recipe's. Stages of a model already shipped to ``models_dir``
    (by default the recipe's folder, data/models/) with the same configs are restored, not rerun
    (``restore_shipped``).
    """
    recipe = load_recipe(path)
    stages = recipe["stages"]
    names = [s["name"] for s in stages]
    if stop_after is not None and stop_after not in names:
        raise ValueError(f"--stop-after {stop_after!r} is not a stage of {path}; its stages are {names}")
    out = Path(out_dir or recipe["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    restored = restore_shipped(recipe, out, Path(models_dir) if models_dir is not None else Path(path).parent)
    ship_stages = set(recipe.get("ship", {}).values())
    outcome, model_dir = {}, None
    for stage, chain in zip(stages, chain_hashes(stages)):
        folder = out / stage["name"]
        status = _run_stage(stage, chain, folder, out=out, base=model_dir, device=device,
                            stop_at_step=stop_at_step, progress=progress)
        outcome[stage["name"]] = "restored" if status == "skipped" and stage["name"] in restored else status
        if stage["kind"] in MODEL_KINDS:
            # a stage that ships hands on the copy that ships: the chat model is fine-tuned from
            # exactly the base model in data/models/base, whether it was just trained or restored
            shipped = folder / SHIPPED
            model_dir = shipped if stage["name"] in ship_stages and shipped.is_dir() else folder / "model"
        if status == "interrupted" or stage["name"] == stop_after:
            break
    return outcome


def restore_shipped(recipe: dict, out: Path, models_dir: Path) -> list[str]:
    """Bring back the finished stages of models already shipped: ``[stage names restored]``.

    A shipped model keeps, under ``stages/``, the ``done.json`` of every stage that made it. Where
    each of those stages' chain hash matches the recipe's (the same configs, in the same order), the
    stages count as done and the model is put back as the last one's ``shipped/`` copy, so a fresh
    checkout (with ``runs/`` empty) starts at the first stage after the shipped model instead of
    retraining it: the recipe can span several sittings. The shipped stages may be the first part
    of the model's stages in the recipe (stages added after them, to train it further in a later
    sitting, then start from its weights). A model whose stages do not match is left alone and its
    stages run.
    """
    stages, ship = recipe["stages"], recipe.get("ship", {})
    names, chains = [s["name"] for s in stages], chain_hashes(stages)
    restored, start = [], 0
    for model_name, stage_name in sorted(ship.items(), key=lambda item: names.index(item[1])):
        end = names.index(stage_name) + 1
        segment, shipped = list(range(start, end)), models_dir / model_name
        start = end
        if all(_is_done(out / names[i], chains[i]) for i in segment):
            continue
        made = [i for i in segment if (shipped / "stages" / names[i] / "done.json").is_file()]
        if not made or made != segment[:len(made)] or not all(_is_done(shipped / "stages" / names[i], chains[i])
                                                              for i in made):
            break  # the shipped model was made by other configs: its stages, and every later one, run
        if not all(_is_done(out / names[i], chains[i]) or stages[i]["kind"] == "corpus" for i in range(segment[0])):
            break  # an earlier stage is not done: the shipped model cannot count as its continuation
        # the corpus is not shipped (nor counted above); remaking it takes seconds, and the run
        # remakes it before any later stage that reads it
        kept = [i for i in made if stages[i]["kind"] != "corpus"]
        if not all(_is_done(out / names[i], chains[i]) for i in kept):
            _restore(shipped, out, [stages[i] for i in kept])
            restored += [names[i] for i in kept if names[i] not in restored]
        if len(made) < len(segment):
            break  # the model's later stages run now, from the restored weights
    return restored


def _restore(shipped: Path, out: Path, stages: list[dict]) -> None:
    """Put a shipped model's stages back under ``out``: their logs and done.json, its tokenizer, and
    its weights as the last stage's ``shipped/`` copy."""
    from llmkit.model.weights import TOKENIZER_FILE

    for stage in stages:
        folder = out / stage["name"]
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        copy_stage_files(shipped / "stages" / stage["name"], folder)
        if stage["kind"] == "tokenizer":
            atomic_copy(shipped / TOKENIZER_FILE, folder / TOKENIZER_FILE)
    (out / stages[-1]["name"] / SHIPPED).mkdir()
    for file in ("config.json", "model.safetensors", TOKENIZER_FILE):
        atomic_copy(shipped / file, out / stages[-1]["name"] / SHIPPED / file)


def _is_done(folder: Path, chain: str) -> bool:
    done = folder / "done.json"
    return done.is_file() and json.loads(done.read_text(encoding="utf-8")).get("chain") == chain


def _run_stage(stage: dict, chain: str, folder: Path, **context) -> str:
    if _is_done(folder, chain):
        return "skipped"
    started = folder / "started.json"
    if folder.exists() and not (started.is_file() and json.loads(started.read_text(encoding="utf-8")).get("chain") == chain):
        shutil.rmtree(folder)  # a run of an older config: its checkpoints must not be resumed
    folder.mkdir(parents=True, exist_ok=True)
    write_json(started, {"chain": chain})
    log = stage_logger(folder, stage["name"])
    log.info("stage %s (%s) starts; settings %s", stage["name"], stage["kind"], json.dumps(stage["settings"]))
    clock = time.perf_counter()
    figures = RUNNERS[stage["kind"]](stage["settings"], folder, log, **context)
    seconds = round(time.perf_counter() - clock, 1)
    if figures is None:
        log.info("stage %s interrupted after %.1f s; run the recipe again to resume", stage["name"], seconds)
        return "interrupted"
    write_json(folder / "done.json", {"chain": chain, "seconds": seconds, "figures": figures})
    log.info("stage %s done in %.1f s", stage["name"], seconds)
    return "done"


# ------------------------------------------------------------------------------------------ ship
STAGE_FILES = ("done.json", "stage.log", "train_log.jsonl", "train_config.json", "sft_config.json",
               "dpo_config.json", "evals.json")


def ship_models(path: str | Path, *, out_dir: str | None = None, models_dir: str | Path | None = None,
                names: list[str] | None = None) -> dict:
    """Copy the finished recipe's models into ``data/models/<name>/``, each with its stages' logs.

    The recipe's ``"ship"`` maps a model name to the stage whose ``shipped/`` folder it is (say
    ``{"base": "pretrain", "chat": "evals"}``). Beside the weights go ``stages/<stage>/`` for that
    stage and every stage since the previous shipped one: the run config, ``train_log.jsonl``,
    ``stage.log`` and ``done.json``. ``names`` ships only those models (say the base while the
    chat model's stages still run). Refused, naming the stage, unless every stage up to the last
    model shipped is done with the current configs: a shipped model always matches the recipe in git.
    """
    recipe = load_recipe(path)
    out = Path(out_dir or recipe["out_dir"])
    models = Path(models_dir) if models_dir is not None else Path(path).parent
    stages, ship = recipe["stages"], recipe.get("ship", {})
    stage_names = [s["name"] for s in stages]
    unknown = sorted(set(names or ()) - set(ship))
    if unknown:
        raise ValueError(f"the recipe ships no model named {', '.join(map(repr, unknown))}; it ships "
                         f"{', '.join(map(repr, ship))}")
    wanted = list(ship) if names is None else [name for name in ship if name in names]
    last = max((stage_names.index(ship[name]) for name in wanted), default=-1)
    for stage, chain in list(zip(stages, chain_hashes(stages)))[: last + 1]:
        done = out / stage["name"] / "done.json"
        if not done.is_file() or json.loads(done.read_text(encoding="utf-8")).get("chain") != chain:
            raise RuntimeError(f"stage {stage['name']!r} is not done with its current config; run "
                               f"`llmkit recipe {path}` to the end first")
    shipped, start = {}, 0
    for model_name, stage_name in ship.items():
        end = stage_names.index(stage_name) + 1
        if model_name in wanted:
            shipped[model_name] = _ship_one(out / stage_name / SHIPPED, models / model_name,
                                            [out / name for name in stage_names[start:end]],
                                            RunFolder(out, recipe["out_dir"]))
        start = end
    return shipped


KEPT_ON_SHIP = ("README.md",)  # written by hand, so shipping leaves it (and says it may need updating)


@dataclass(frozen=True)
class RunFolder:
    """Where a run was made (``path``) and how shipped files name it (``written_as``, the recipe's
    own ``out_dir``, say ``runs/recipe``): a model in git must not carry one machine's folder names."""
    path: Path
    written_as: str

    def portable(self, text: str) -> str:
        """``text`` with every spelling of the run folder (as given, absolute, resolved) replaced."""
        spellings = {str(self.path), str(self.path.absolute()), str(self.path.resolve())} - {self.written_as}
        for spelling in sorted(spellings, key=len, reverse=True):  # longest first: one may contain another
            text = text.replace(spelling, self.written_as)
        return text


def _ship_one(weights: Path, target: Path, stage_folders: list[Path], run: RunFolder) -> Path:
    """Replace everything in ``target`` but its README with ``weights``' files and those stages' logs.

    Files a previous model left (an older run's logs or measurements) are removed, not kept beside
    the new weights: a notebook that still read them would show the old model's figures as the new one's.
    """
    if target.is_dir():
        for old in sorted(target.iterdir()):
            if old.name in KEPT_ON_SHIP:
                continue
            if old.is_dir():
                shutil.rmtree(old)
            else:
                old.unlink()
    target.mkdir(parents=True, exist_ok=True)
    for file in sorted(weights.iterdir()):
        atomic_copy(file, target / file.name)
    for folder in stage_folders:
        (target / "stages" / folder.name).mkdir(parents=True)
        copy_stage_files(folder, target / "stages" / folder.name, run=run)
    return target


def copy_stage_files(source: Path, target: Path, *, run: RunFolder | None = None) -> None:
    """Copy a stage's record (``STAGE_FILES`` that exist) between a run folder and a shipped model.

    When shipping (``run`` given), paths inside the run folder are rewritten to the recipe's
    ``out_dir`` (``RunFolder.portable``), so the record in git names no machine's folders."""
    runs = [] if run is None else [run, *_other_run_folders(source, run)]
    for file in STAGE_FILES:
        if not (source / file).is_file():
            continue
        if run is None:
            atomic_copy(source / file, target / file)
        else:
            text = (source / file).read_text(encoding="utf-8")
            for folder in runs:
                text = folder.portable(text)
            write_text(target / file, text)


def _other_run_folders(source: Path, run: RunFolder) -> list[RunFolder]:
    """The run folder a stage's own config says it ran in, when that is another absolute folder: a
    stage made in one run and reused in a copy of it (``cp -al RUN_A RUN_B``, to branch a run) names
    the first, and shipping must not carry that folder's name into git either."""
    found = []
    for name in ("train_config.json", "sft_config.json", "dpo_config.json"):
        if (source / name).is_file():
            made_in = Path(json.loads((source / name).read_text(encoding="utf-8")).get("out_dir", "")).parent
            if made_in.is_absolute() and made_in.resolve() != run.path.resolve():
                found.append(RunFolder(made_in, run.written_as))
    return found


def stage_logs(model_dir: str | Path, recipe: str | Path | None = None) -> list[tuple[str, list[dict]]]:
    """The training logs a shipped model came from, in recipe order: ``[(stage name, records), ...]``.

    ``--ship`` put each stage's ``train_log.jsonl`` under ``<model_dir>/stages/<stage>/``; the
    order comes from the recipe (by default ``recipe.json`` beside the model folder, the one it
    shipped from). Stages that do not train (tokenizer, corpus, evals) have no log and are left out.
    """
    model_dir = Path(model_dir)
    recipe_path = Path(recipe) if recipe is not None else model_dir.parent / "recipe.json"
    stages = model_dir / "stages"
    if not stages.is_dir():
        raise FileNotFoundError(f"{model_dir} has no stages/ folder: ship it with "
                                f"`python -m llmkit recipe {recipe_path} --ship {model_dir.name}`")
    names = [stage["name"] for stage in load_recipe(recipe_path)["stages"]]
    return [(name, read_log(stages / name / "train_log.jsonl")) for name in names
            if (stages / name / "train_log.jsonl").is_file()]


def recipe_main(argv: list[str] | None = None) -> int:
    """``llmkit recipe RECIPE.json``: every stage not yet done, in order."""
    parser = argparse.ArgumentParser(prog="llmkit recipe", description="Build the course models end to end, "
                                     "resuming after an interruption.")
    parser.add_argument("recipe", help="the recipe file, e.g. data/models/recipe.json")
    parser.add_argument("--device", help="auto, cpu, cuda or mps for every training stage and the evals")
    parser.add_argument("--stop-after", metavar="STAGE", help="stop once this stage is done")
    parser.add_argument("--stop-at-step", type=int, metavar="N",
                        help="stop the next training stage after N steps with a checkpoint, as an interruption would")
    parser.add_argument("--out-dir", help="override the recipe's out_dir")
    parser.add_argument("--models-dir", help="where --ship writes the models and where finished ones are restored "
                        "from (default: the recipe's folder, data/models/)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs still written)")
    parser.add_argument("--ship", nargs="*", metavar="MODEL", help="copy the finished models (all, or those "
                        "named, e.g. base) and their stage logs into the recipe's folder (data/models/<name>/) "
                        "instead of running")
    args = parser.parse_args(argv)
    if args.ship is not None:
        for name, folder in ship_models(args.recipe, out_dir=args.out_dir, models_dir=args.models_dir,
                                        names=args.ship or None).items():
            print(f"{name:<16} shipped to {folder}")
            if (folder / "README.md").is_file():
                print(f"{'':<16} {folder / 'README.md'} was kept: make it describe the model just shipped")
        return 0
    outcome = run_recipe(args.recipe, device=args.device, stop_after=args.stop_after,
                         stop_at_step=args.stop_at_step, out_dir=args.out_dir, models_dir=args.models_dir,
                         progress=not args.no_progress)
    for name, status in outcome.items():
        print(f"{name:<16} {status}")
    return 0
