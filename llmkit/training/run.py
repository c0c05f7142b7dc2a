"""The skeleton every training run follows: resume or start fresh, report, fit, save.

Pretraining and fine-tuning differ in their data, loss and held-out report; the sequence around
them is the same, so it lives here once:

1. start fresh (clear the log, report on the untrained model) or resume from the newest complete
   checkpoint, refusing if the config changed in a way that would change what is computed;
2. record the config beside the log (``<stage>_config.json``);
3. ``fit``, checkpointing every ``checkpoint_every`` steps;
4. once the last step is done, write ``model/`` (config.json, model.safetensors, tokenizer.json),
   a folder ``load_model`` opens.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from llmkit.files import atomic_write
from llmkit.model.transformer import Transformer
from llmkit.training.checkpoint import TrainingLog, load_checkpoint, save_checkpoint, save_model_folder
from llmkit.training.config import RunConfig
from llmkit.training.data import Batch
from llmkit.training.distributed import Processes
from llmkit.training.loop import LossFn, fit, lm_loss


class ResumeConflict(ValueError):
    """``--resume`` with a config that would make the resumed run compute something else."""


@dataclass
class Stage:
    """What one kind of run brings to the skeleton: its name, data, loss and held-out report."""

    name: str  # "train", "sft", "dpo": names the saved config, <name>_config.json
    batch_at: Callable[[int], Batch]
    report: Callable[[int], dict[str, str]]
    tokenizer_file: Path  # copied into the finished model folder
    loss_fn: LossFn = lm_loss
    before_save: Callable[[Transformer], None] | None = None  # e.g. switch dropout off


def run_stage(stage: Stage, cfg: RunConfig, model: Transformer, optimizer: torch.optim.Optimizer,
              procs: Processes, log: TrainingLog, *, resume: bool = False, stop_after: int | None = None,
              progress: bool = True) -> Transformer:
    """Resume or start, fit, and save the finished model as the module docstring describes."""
    out_dir = Path(cfg.out_dir)
    if procs.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    start_step = 0
    if resume:
        state = load_checkpoint(out_dir / "checkpoint", model, optimizer, procs)
        check_resumable(cfg, state)
        start_step = state["step"]
        log.truncate_after(start_step)
    if procs.is_main:
        atomic_write(out_dir / f"{stage.name}_config.json", json.dumps(cfg.to_dict(), indent=2) + "\n")
    if not resume and procs.is_main:
        log.clear()
        stage.report(0)

    fit(model, optimizer, stage.batch_at, cfg, procs, start_step=start_step, stop_after=stop_after,
        loss_fn=stage.loss_fn, on_report=stage.report, log=log, progress=progress,
        on_checkpoint=lambda step: save_checkpoint(out_dir / "checkpoint", model, optimizer, step, procs,
                                                   config=cfg.to_dict()))

    if (stop_after is None or stop_after >= cfg.max_steps) and procs.is_main:
        if stage.before_save is not None:
            stage.before_save(model)
        save_model_folder(model, stage.tokenizer_file, out_dir / "model")
    return model


def check_resumable(cfg: RunConfig, state: dict) -> None:
    """Refuse to resume with settings that change the computation.

    The checkpoint holds the optimizer's settings (weight decay, betas) and the run's schedule; a
    resumed run with other values would silently mix two runs. Where and how often things are
    logged may change (``RunConfig.RESUMABLE_CHANGES``).
    """
    saved = state.get("config")
    if not isinstance(saved, dict):
        return  # a checkpoint from before configs were stored in it: nothing to compare against
    changes = cfg.changes_from(saved)
    if changes:
        raise ResumeConflict(
            f"cannot resume from {state['folder']}: the config differs from the one it was trained with "
            f"({'; '.join(changes)}). Resume keeps a run's settings: resume with the original values, or "
            f"start a new run in another out_dir. Only {', '.join(cfg.RESUMABLE_CHANGES)} may change.")
