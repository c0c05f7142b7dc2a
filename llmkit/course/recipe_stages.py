"""The recipe's stages, one function per kind: tokenizer, corpus, pretrain, sft, dpo, evals.

Each runner takes the stage's settings, its folder and a logger, does its work, and returns the
figures to record in ``done.json`` (or None when a training stage stopped early and will resume).
``llmkit.course.recipe`` runs them in order; see there for the recipe file and resuming.

- ``tokenizer``: byte-level BPE on a mix of Shakespeare, the course's notes (modern English)
  and generated JSON, code and dialogues (``llmkit.course.structured_text``), so snake_case
  names and JSON cost fewer tokens;
- ``corpus``: the pretraining text: Shakespeare plus generated structured text that builds
  copying, optionally with modern English from a dictionary (``dictionary_documents``); held out:
  Shakespeare's held-out plays, separately generated structured text, held-out dictionary entries;
- ``pretrain``: ``llmkit.training.train.train`` on that corpus (bits/byte on both held-out texts);
  ``grow_from`` names an earlier pretrain stage to start from, grown to this stage's depth (the
  recipe's ``copy_warmup`` builds the copying circuit in a shallow model first: see its README);
- ``sft``: skill conversations (``llmkit.course.skills``), optionally only some ``kinds`` or the
  kinds drawn by other shares (``mix``);
- ``dpo``: skill preference pairs against the previous stage as reference;
- ``evals``: greedy skill evaluations per split through ``Client`` + ``run_agent``.

The pretrain, sft and evals stages also write ``shipped/``: the model with its
weights rounded to bfloat16 and stored so (``ship_copy``). The pretrain and evals stages measure
their figures on that copy, the one that ships.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from pathlib import Path

from llmkit.paths import data_path

KINDS = ("tokenizer", "corpus", "pretrain", "sft", "dpo", "evals")
MODEL_KINDS = ("pretrain", "sft", "dpo")
SHIPPED = "shipped"  # the folder, in every stage that makes a model and in evals, of the model as it ships (bf16)
DOC_SEPARATOR = "\n<|endoftext|>\n"


def write_json(path: Path, value) -> None:
    """Write JSON atomically: a crash never leaves half a file."""
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def write_text(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".part")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def load_recipe(path: str | Path) -> dict:
    """The recipe with each stage's config read in; a missing file or an unknown kind is named."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"recipe file {path} does not exist; the course recipe is data/models/recipe.json")
    recipe = json.loads(path.read_text(encoding="utf-8"))
    names = [s["name"] for s in recipe["stages"]]
    if len(set(names)) != len(names):
        raise ValueError(f"stage names in {path} must be distinct, got {names}")
    for stage in recipe["stages"]:
        if stage["kind"] not in KINDS:
            raise ValueError(f"stage {stage['name']!r} has kind {stage['kind']!r}; use one of {KINDS}")
        config = path.parent / stage["config"]
        if not config.is_file():
            raise FileNotFoundError(f"stage {stage['name']!r} names the config {config}, which does not exist")
        stage["settings"] = json.loads(config.read_text(encoding="utf-8"))
    recipe.setdefault("out_dir", "runs/recipe")
    return recipe


def chain_hashes(stages: list[dict]) -> list[str]:
    """A hash per stage of its kind and settings and of every stage before it."""
    hashes, previous = [], ""
    for stage in stages:
        text = json.dumps({"previous": previous, "kind": stage["kind"], "settings": stage["settings"]}, sort_keys=True)
        previous = hashlib.sha256(text.encode()).hexdigest()[:16]
        hashes.append(previous)
    return hashes


def stage_logger(folder: Path, name: str) -> logging.Logger:
    """A logger writing to ``<folder>/stage.log`` (appending: a resumed stage keeps its history)."""
    logger = logging.getLogger(f"llmkit.recipe.{name}.{folder}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(folder / "stage.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    return logger


# ----------------------------------------------------------------------------------------- stages
def run_tokenizer(settings: dict, folder: Path, log: logging.Logger, **_) -> dict:
    from llmkit.course.structured_text import documents
    from llmkit.tokens.tokenizer import COURSE_SPECIAL_TOKENS, Tokenizer

    shakespeare = data_path("corpus", "train.txt").read_text(encoding="utf-8")[: settings.get("shakespeare_chars")]
    docs = shakespeare.split("<|endoftext|>")
    if settings.get("notes", True):
        docs += [p.read_text(encoding="utf-8") for p in sorted(data_path("docs").glob("*.md"))]
    docs += documents(settings["structured_documents"], seed=settings.get("seed", 0))
    log.info("training a %d-token vocabulary on %d documents (%d chars)", settings["vocab_size"], len(docs),
             sum(map(len, docs)))
    tokenizer = Tokenizer.train(docs, settings["vocab_size"], pattern=settings.get("pattern", "gpt4"),
                                special_tokens=COURSE_SPECIAL_TOKENS,
                                progress=settings.get("progress", True))
    tokenizer.save(folder / "tokenizer.json")
    sample = documents(50, seed=10**6)
    figures = {"bytes_per_token_structured": round(sum(len(d.encode()) for d in sample) /
                                                   sum(len(tokenizer.encode_ordinary(d)) for d in sample), 3)}
    log.info("wrote tokenizer.json: %s", figures)
    return figures


def run_corpus(settings: dict, folder: Path, log: logging.Logger, **_) -> dict:
    from llmkit.course.structured_text import documents

    seed = settings.get("seed", 1)
    plays = data_path("corpus", "train.txt").read_text(encoding="utf-8")[: settings.get("shakespeare_chars")]
    docs = [d.strip("\n") for d in plays.split("<|endoftext|>") if d.strip()]
    docs += documents(settings["structured_documents"], seed=seed)
    if settings.get("dictionary_entries_per_document"):
        train, heldout = dictionary_documents(settings["dictionary_entries_per_document"],
                                              settings["heldout_dictionary_entries"], seed=seed)
        docs += train
        write_text(folder / "heldout_dictionary.txt", heldout)
    random.Random(f"llmkit-recipe-corpus|{seed}").shuffle(docs)
    write_text(folder / "train.txt", DOC_SEPARATOR.join(docs))
    write_text(folder / "heldout.txt", data_path("corpus", "heldout.txt").read_text(encoding="utf-8"))
    heldout = documents(settings["heldout_structured_documents"], seed=seed + 1, split="heldout")
    write_text(folder / "heldout_structured.txt", DOC_SEPARATOR.join(heldout))
    figures = {"documents": len(docs), "train_chars": sum(map(len, docs))}
    log.info("wrote train.txt and the held-out texts: %s", figures)
    return figures


def dictionary_documents(per_document: int, heldout_entries: int, *, seed: int) -> tuple[list[str], str]:
    """Modern English for pretraining: ``data/corpus/dictionary.txt``'s entries (WordNet glosses with
    example sentences) shuffled, ``heldout_entries`` of them kept apart as one held-out text and the
    rest grouped ``per_document`` to a training document (one entry alone is shorter than a line of
    a play, and a separator between each would be a tenth of the tokens)."""
    lines = data_path("corpus", "dictionary.txt").read_text(encoding="utf-8").splitlines()
    random.Random(f"llmkit-recipe-dictionary|{seed}").shuffle(lines)
    heldout, train = lines[:heldout_entries], lines[heldout_entries:]
    docs = ["\n".join(train[i:i + per_document]) for i in range(0, len(train), per_document)]
    return docs, "\n".join(heldout) + "\n"


TRAIN_TEXTS = ("corpus", "corpus_english", "shakespeare")


def train_text_path(name: str, out: Path) -> Path:
    """The text a pretrain stage reads: a corpus stage's mix (``corpus``, or ``corpus_english`` with
    the dictionary's modern English added), or Shakespeare's plays alone (``data/corpus/train.txt``,
    for a closing anneal on the text the held-out score is measured on)."""
    if name in ("corpus", "corpus_english"):
        return out / name / "train.txt"
    if name == "shakespeare":  # relative to the working directory when inside it: the run config ships
        path = data_path("corpus", "train.txt")
        return Path(os.path.relpath(path)) if path.is_relative_to(Path.cwd()) else path
    raise ValueError(f"train_text must be one of {', '.join(map(repr, TRAIN_TEXTS))}, got {name!r}")


def run_pretrain(settings: dict, folder: Path, log: logging.Logger, *, out: Path, device: str | None,
                 stop_at_step: int | None, progress: bool, **_) -> dict | None:
    from llmkit.training.config import TrainConfig
    from llmkit.training.data import load_tokens
    from llmkit.training.train import bits_per_byte, train

    settings = dict(settings)
    text_name = settings.pop("train_text", "corpus")
    train_file = train_text_path(text_name, out)
    values = {**settings, "tokenizer": str(out / "tokenizer" / "tokenizer.json"), "train_corpus": str(train_file),
              "heldout_corpus": str(out / "corpus" / "heldout.txt"), "out_dir": str(folder)}
    if settings.get("grow_from"):  # the name of an earlier pretrain stage: start from its model, grown
        source = out / settings["grow_from"]
        # a stage restored from a shipped model has only its shipped (bf16-rounded) copy
        values["grow_from"] = str(source / "model" if (source / "model").is_dir() else source / SHIPPED)
    if device:
        values["device"] = device
    cfg = TrainConfig.from_dict(values, source="the pretrain stage")
    resume = has_checkpoint(folder)
    start = f"from {settings['grow_from']}'s model, grown" if settings.get("grow_from") else "from scratch"
    log.info("pretraining %s", "from the last checkpoint" if resume else start)
    train(cfg, resume=resume, stop_after=stop_at_step, progress=progress)
    if not (folder / "model").is_dir():
        return None
    model = ship_copy(folder / "model", folder / SHIPPED)
    figures = {}
    corpus = out / ("corpus" if text_name == "shakespeare" else text_name)  # the held-out texts beside it
    for name, text in held_out_texts(corpus).items():
        scores = bits_per_byte(model, None, load_tokens(text, cfg.tokenizer), dtype=cfg.dtype)
        figures[f"heldout_bpb_{name}"] = round(scores["bpb"], 4)
    from llmkit.tokens.tokenizer import Tokenizer
    from llmkit.training.train import copy_accuracy

    figures["copy_accuracy"] = round(copy_accuracy(model, Tokenizer.load(cfg.tokenizer)), 4)  # as the log measures it
    log.info("held-out bits/byte and copy accuracy of the shipped (bf16-rounded) model: %s", figures)
    return figures


def held_out_texts(corpus: Path) -> dict[str, Path]:
    """A corpus stage's held-out texts by name: Shakespeare's held-out plays, the separately generated
    structured text, and the held-out dictionary entries where that corpus has them."""
    texts = {"shakespeare": corpus / "heldout.txt", "structured": corpus / "heldout_structured.txt"}
    if (corpus / "heldout_dictionary.txt").is_file():
        texts["dictionary"] = corpus / "heldout_dictionary.txt"
    return texts


def ship_copy(model_dir: Path, shipped_dir: Path):
    """Round ``model_dir``'s weights to bfloat16 and save them, stored in bf16, to ``shipped_dir``.

    Returns the rounded model: the figures a stage records are measured on it, so the shipped file
    (half the size) loads as exactly the model that was measured. Training continues from the
    unrounded ``model_dir``.
    """
    import shutil

    import torch

    from llmkit.model.weights import TOKENIZER_FILE, load_model, round_weights, save

    model, _ = load_model(model_dir)
    round_weights(model, torch.bfloat16)
    save(model, shipped_dir, storage_dtype=torch.bfloat16)
    shutil.copyfile(model_dir / TOKENIZER_FILE, shipped_dir / TOKENIZER_FILE)
    return model


def has_checkpoint(folder: Path) -> bool:
    """True when an interrupted run left a checkpoint to resume from."""
    return any(folder.glob("checkpoint*"))


# a fine-tuning stage's settings about the course's data
COURSE_SETTINGS = ("kinds", "probe", "lookup_weight", "wider_phrasings", "open_framing", "open_enums", "open_talk",
                   "open_forms", "mix", "greetings")


def _finetune_config(settings: dict, base: Path, folder: Path, device: str | None):
    from llmkit.training.config import FinetuneConfig

    values = {k: v for k, v in settings.items() if k not in COURSE_SETTINGS}
    if "kinds" in settings and settings["kinds"] is not None:
        from llmkit.course.skills import KINDS as SKILL_KINDS

        unknown = [k for k in settings["kinds"] if k not in SKILL_KINDS]
        if unknown:
            raise ValueError(f"the {folder.name} stage names unknown kinds {unknown}; choose from {SKILL_KINDS}")
    if settings.get("mix") is not None:
        from llmkit.course.skills import checked_mix

        try:
            checked_mix(settings["mix"])
        except ValueError as error:
            raise ValueError(f"the {folder.name} stage: {error}") from None
    values.update(base_model=str(base), out_dir=str(folder), **({"device": device} if device else {}))
    return FinetuneConfig.from_dict(values, source=f"the {folder.name} stage")


def run_finetune(stage: str, settings: dict, folder: Path, log: logging.Logger, *, base: Path, device: str | None,
                 stop_at_step: int | None, progress: bool, **_) -> dict | None:
    from llmkit.course.recipe_training import finetune_stage

    cfg = _finetune_config(settings, base, folder, device)
    resume = has_checkpoint(folder)
    log.info("%s on %s from %s%s", stage.upper(), settings.get("kinds") or "every kind", base,
             ", resuming from the last checkpoint" if resume else "")
    if not finetune_stage(stage, cfg, kinds=settings.get("kinds"), probe=settings.get("probe"), resume=resume,
                          stop_after=stop_at_step, progress=progress, lookup_weight=settings.get("lookup_weight", 1.0),
                          wider_phrasings=settings.get("wider_phrasings", False),
                          open_framing=settings.get("open_framing", False), mix=settings.get("mix"),
                          open_enums=settings.get("open_enums", False),
                          open_talk=settings.get("open_talk", False), greetings=settings.get("greetings", 0.0),
                          open_forms=settings.get("open_forms", False)):
        return None
    # the copy a recipe may ship part-way (say the skills model, to go on in a later sitting);
    # a stage that ships hands it, not model/, to the next stage, trained or restored alike
    ship_copy(folder / "model", folder / SHIPPED)
    return _last_eval(folder)


def _last_eval(folder: Path) -> dict:
    from llmkit.training.train import read_log

    evals = [r for r in read_log(folder / "train_log.jsonl") if r["kind"] == "eval"]
    return {k: v for k, v in evals[-1].items() if k != "kind"} if evals else {}


def run_evals(settings: dict, folder: Path, log: logging.Logger, *, base: Path, device: str | None,
              progress: bool, **_) -> dict:
    from tqdm.auto import tqdm

    from llmkit.chat.client import Client
    from llmkit.course.forced_scores import teacher_forced_scores
    from llmkit.course.skill_scores import conversations_run, evaluate_skills
    from llmkit.course.skills import EVAL_SPLITS, MIX

    ship_copy(base, folder / SHIPPED)  # the evals score the model exactly as it ships
    client = Client(folder / SHIPPED, device=device)
    splits, kinds = settings.get("splits", EVAL_SPLITS), settings.get("kinds") or list(MIX)  # the kinds it learnt
    total = conversations_run(kinds, splits, settings["per_kind"])
    bar = tqdm(total=total, desc="evals", unit="conv", disable=not progress)
    report = evaluate_skills(client, per_kind=settings["per_kind"], splits=splits, kinds=kinds,
                             seed=settings.get("seed", 0), max_tokens=settings.get("max_tokens", 96),
                             progress=lambda done: bar.update(done - bar.n), batch=settings.get("batch", 1))
    bar.close()
    model = client.model.eval()
    for split in splits:  # the choice of tool and the copying of values alone, every earlier token given
        report[split]["teacher_forced"] = teacher_forced_scores(model, client.tokenizer, split,
                                                                n=2 * settings["per_kind"])
    alone = settings.get("unconstrained_per_kind", 0)
    if alone:  # beside it, what the model writes with the client's constrained decoding off
        free = evaluate_skills(client, per_kind=alone, splits=splits, kinds=kinds, seed=settings.get("seed", 0),
                               max_tokens=settings.get("max_tokens", 96), batch=settings.get("batch", 1),
                               constrain_tools=False)
        for split in splits:
            report[split]["unconstrained"] = {k: v for k, v in free[split].items() if k != "kinds"}
    write_json(folder / "evals.json", report)
    log.info("evals: %s", {s: {k: v for k, v in r.items() if not k.startswith("n_") and k != "kinds"}
                           for s, r in report.items()})
    return {split: {k: v for k, v in r.items() if k != "kinds"} for split, r in report.items()}


RUNNERS = {"tokenizer": run_tokenizer, "corpus": run_corpus, "pretrain": run_pretrain,
           "sft": lambda *a, **k: run_finetune("sft", *a, **k), "dpo": lambda *a, **k: run_finetune("dpo", *a, **k),
           "evals": run_evals}
