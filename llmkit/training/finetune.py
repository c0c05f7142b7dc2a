"""Fine-tuning: SFT on conversations, or DPO on preference pairs, from a saved model.

Both stages run the same skeleton as pretraining (``llmkit.training.run``: resume, report, fit,
save); only the data, the loss and the held-out report are new. The examples are handed in as a
function ``(n, split, seed) -> examples``: any objects that render with the chat template (SFT) or
into prompt/chosen/rejected ids (DPO). Which conversations to teach is the caller's choice; the
course's recipe (``llmkit.course.recipe``) is one such caller.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from llmkit.model.transformer import Transformer
from llmkit.model.weights import TOKENIZER_FILE, load_model, model_folder
from llmkit.training.checkpoint import TrainingLog
from llmkit.training.config import FinetuneConfig
from llmkit.devices import resolve_device
from llmkit.training.distributed import Processes
from llmkit.training.dpo import DPOObjective, PairSource
from llmkit.training.loop import make_optimizer
from llmkit.training.run import Stage, run_stage
from llmkit.training.sft import ExampleSource, conversation_batch, length_groups, masked_loss, set_dropout, step_seed

STAGES = ("sft", "dpo")
Probe = Callable[[Transformer], dict]  # figures measured on the model at each report, logged beside the loss


def finetune(stage: str, cfg: FinetuneConfig, examples: ExampleSource | PairSource, *, resume: bool = False,
             stop_after: int | None = None, progress: bool = True, probe: Probe | None = None) -> Transformer:
    """Run SFT (``stage="sft"``) or DPO (``"dpo"``) on ``examples``; returns the fine-tuned model.

    ``probe``: a function of the model run at every held-out report, whose figures are logged in
    the eval record under ``"probe"``. A loss falls long before a skill appears; a probe that
    *uses* the model (say, a few greedy conversations scored) shows when it does.

    Writes into ``cfg.out_dir``: ``<stage>_config.json``, ``train_log.jsonl``, ``checkpoint/`` and,
    when finished, ``model/`` (config.json, model.safetensors, tokenizer.json) for ``load_model``.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be 'sft' or 'dpo', got {stage!r}")
    if not callable(examples):
        raise TypeError(f"examples must be a function (n, split, seed) -> examples, got {type(examples).__name__}")
    procs = Processes(resolve_device(cfg.device))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(cfg.base_model, device=procs.device)
    set_dropout(model, cfg.dropout)
    optimizer = make_optimizer(model, cfg)
    log = TrainingLog(Path(cfg.out_dir) / "train_log.jsonl")
    tokenizer_file = model_folder(cfg.base_model) / TOKENIZER_FILE
    if stage == "sft":
        run = _sft_stage(model, tokenizer, cfg, examples, log, tokenizer_file, probe)
    else:
        run = _dpo_stage(model, tokenizer, cfg, examples, log, procs, tokenizer_file, probe)
    return run_stage(run, cfg, model, optimizer, procs, log, resume=resume, stop_after=stop_after,
                     progress=progress)


def _recent_mean(values: list[float], count: int) -> float | None:
    """The mean of the last ``count`` steps' values, rounded for the log (None before the first step)."""
    recent = values[-count:]
    return round(sum(recent) / len(recent), 4) if recent else None


def _probed(model: Transformer, probe: Probe | None) -> dict:
    return {} if probe is None else {"probe": probe(model)}


def _sft_stage(model: Transformer, tokenizer, cfg: FinetuneConfig, examples: ExampleSource, log: TrainingLog,
               tokenizer_file: Path, probe: Probe | None) -> Stage:
    context = model.config.context_length
    heldout = examples(cfg.heldout_examples, "heldout", cfg.seed)
    heldout_batches = [conversation_batch(heldout[i:i + 16], tokenizer, context) for i in range(0, len(heldout), 16)]

    def batch_at(step: int):
        return length_groups(examples(cfg.batch_size, "train", step_seed(cfg.seed, step)), tokenizer, context,
                             cfg.length_groups)

    def report(step: int) -> dict[str, str]:
        loss = masked_loss(model, heldout_batches)
        log.write(kind="eval", step=step, heldout_loss=round(loss, 4), **_probed(model, probe))
        return {"heldout_loss": f"{loss:.3f}"}

    return Stage("sft", batch_at, report, tokenizer_file, before_save=lambda m: set_dropout(m, 0.0))


def _dpo_stage(model: Transformer, tokenizer, cfg: FinetuneConfig, pairs: PairSource, log: TrainingLog,
               procs: Processes, tokenizer_file: Path, probe: Probe | None) -> Stage:
    reference, _ = load_model(cfg.base_model, device=procs.device)
    objective = DPOObjective(reference, tokenizer, cfg, procs.device, pairs=pairs)
    heldout_pairs = pairs(cfg.heldout_examples, "heldout", cfg.seed)

    def report(step: int) -> dict[str, str]:
        scores = objective.heldout_scores(model, heldout_pairs)
        log.write(kind="eval", step=step, heldout_loss=round(scores["loss"], 4),
                  heldout_reward_accuracy=round(scores["reward_accuracy"], 4),
                  heldout_chosen_reward=round(scores["chosen_reward"], 4),
                  heldout_rejected_reward=round(scores["rejected_reward"], 4),
                  train_reward_accuracy=_recent_mean(objective.accuracies, cfg.eval_every),
                  train_chosen_reward=_recent_mean(objective.chosen_rewards, cfg.eval_every),
                  train_rejected_reward=_recent_mean(objective.rejected_rewards, cfg.eval_every),
                  **_probed(model, probe))
        return {"reward_acc": f"{scores['reward_accuracy']:.2f}"}

    return Stage("dpo", objective.batch_at, report, tokenizer_file, loss_fn=objective.loss_fn,
                 before_save=lambda m: set_dropout(m, 0.0))
