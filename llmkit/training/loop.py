"""The training loop every stage shares: the loss, AdamW, the learning-rate schedule and ``fit``.

One step of training is: take a batch of token windows, run the model, measure how surprised it
was by each true next token (cross-entropy, in nats), and nudge every weight a little in the
direction that lowers that surprise (AdamW). Everything else here is care around that step:

- the learning rate warms up, then decays along a cosine, so early steps don't blow the weights up
  and late steps settle into a minimum;
- gradients are clipped to a maximum norm, so one odd batch cannot undo hours of progress;
- a loss or gradient that stops being a finite number stops the run before anything is saved.

``fit`` takes a function that returns the batch for a step and a loss over
``(logits, targets, mask)``, so pretraining, SFT (a mask on the assistant's tokens) and DPO reuse it.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from typing import Callable

import torch
import torch.nn.functional as F

from llmkit.model.transformer import Transformer
from llmkit.progress import progress_bar
from llmkit.training.config import RunConfig
from llmkit.training.checkpoint import TrainingLog
from llmkit.training.data import Batch
from llmkit.training.distributed import Processes, mean_over_processes, wrap_model

LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


class TrainingDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite; nothing from that point is saved."""


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (nats per token) over the positions ``mask`` selects (all when None).

    Dividing by ``max(count, 1)`` makes a batch with nothing to learn from give a loss of 0 and
    zero gradients, never 0/0 = NaN.
    """
    nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    if mask is None:
        return nll.mean()
    weights = mask.flatten().to(nll.dtype)
    return (nll * weights).sum() / weights.sum().clamp(min=1)


def make_optimizer(model: torch.nn.Module, cfg: RunConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices only.

    Decay pulls weights towards zero, a brake on memorising the training text. Norm gains and
    biases are single numbers per channel that set scales, not patterns; decaying them only hurts.
    """
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": cfg.weight_decay}, {"params": vectors, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=cfg.betas)


def learning_rate(step: int, cfg: RunConfig) -> float:
    """Linear warm-up to the peak, then a cosine down to ``min_learning_rate`` at ``max_steps``."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.min_learning_rate + cosine * (cfg.learning_rate - cfg.min_learning_rate)


def autocast(device: torch.device, dtype: str):
    """bfloat16 autocast for the forward pass, or nothing for float32."""
    if dtype == "float32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def _require_finite(finite: torch.Tensor, step: int) -> None:
    if not bool(finite):
        raise TrainingDiverged(
            f"the training loss or gradient became NaN or infinite by step {step}; the run stops and saves "
            "nothing from here. Lower learning_rate (or grad_clip), or check the data; the last checkpoint "
            "before this point is intact.")


def accumulate_gradients(net: torch.nn.Module, batch: Batch | list[Batch], loss_fn: LossFn, cfg: RunConfig,
                         procs: Processes) -> torch.Tensor:
    """Run one step's batch forward and backward, adding to the gradients; returns its loss, detached.

    A batch may come as a list of groups of rows of similar length (``llmkit.training.sft``), each
    padded only to its own longest row. Each group's mean loss is weighted by its share of the
    positions that count (of their weights, when the mask holds weights), so loss and gradients equal those of the whole batch padded as one,
    while the padding that was never going to count is not computed.
    """
    groups = batch if isinstance(batch, list) else [batch]
    counts = [group.targets.numel() if group.mask is None else float(group.mask.sum()) for group in groups]
    total = max(sum(counts), 1)
    loss = torch.zeros((), device=procs.device)
    for i, (group, count) in enumerate(zip(groups, counts)):
        group = group.to(procs.device)
        last = i == len(groups) - 1  # DDP averages gradients across processes once, after the last group
        with nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync():
            with autocast(procs.device, cfg.dtype):
                logits = net(group.inputs)
            part = loss_fn(logits, group.targets, group.mask)
            if len(groups) > 1:
                part = part * (count / total)
            part.backward()
        loss += part.detach()
    return loss


def fit(model: Transformer, optimizer: torch.optim.Optimizer, batch_at: Callable[[int], Batch], cfg: RunConfig,
        procs: Processes, *, start_step: int = 0, stop_after: int | None = None, loss_fn: LossFn = lm_loss,
        on_report: Callable[[int], dict] | None = None, on_checkpoint: Callable[[int], None] | None = None,
        log: TrainingLog | None = None, progress: bool = True) -> None:
    """Run optimizer steps ``start_step .. max_steps`` (or up to ``stop_after``).

    ``batch_at(step)`` gives the batch for a step: a function of the step rather than an iterator,
    so a resumed run sees exactly the batches it would have seen. ``on_report(step)`` runs on the
    main process every ``eval_every`` steps (held-out loss, samples) and returns figures for the
    progress bar; ``on_checkpoint(step)`` runs on every process every ``checkpoint_every`` steps
    and at the end. Neither counts against the tokens/s figure. Whether every loss and gradient
    norm stayed finite is checked (one device sync) before each log line and each checkpoint.
    """
    net = wrap_model(model, procs)
    end = cfg.max_steps if stop_after is None else min(stop_after, cfg.max_steps)
    tokens_per_step = cfg.batch_size * model.config.context_length
    bar = progress_bar(total=cfg.max_steps, initial=start_step, desc="training", unit="step",
               disable=not (progress and procs.is_main), mininterval=1.0)
    loss_sum, steps_since_log, clock = torch.zeros((), device=procs.device), 0, time.perf_counter()
    finite = torch.ones((), dtype=torch.bool, device=procs.device)
    shown: dict[str, str] = {}  # what the progress bar displays after it
    model.train()
    for step in range(start_step, end):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        optimizer.zero_grad(set_to_none=True)
        loss = accumulate_gradients(net, batch_at(step), loss_fn, cfg, procs)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        finite &= torch.isfinite(loss.detach()) & torch.isfinite(norm)
        done = step + 1
        loss_sum += loss.detach()
        steps_since_log += 1
        bar.update(1)

        if done % cfg.log_every == 0 or done == end:
            _require_finite(finite, done)
            mean_over_processes(loss_sum, procs)  # the loss of the global batch, for the log only
            seconds = time.perf_counter() - clock
            mean_loss, speed = loss_sum.item() / steps_since_log, tokens_per_step * steps_since_log / seconds
            shown.update(loss=f"{mean_loss:.3f}", tok_per_s=f"{speed:,.0f}")
            bar.set_postfix(shown)
            if log is not None:
                log.write(kind="train", step=done, loss=round(mean_loss, 4),
                          lr=round(optimizer.param_groups[0]["lr"], 7), tokens_per_s=round(speed),
                          seconds=round(seconds, 2))
            loss_sum.zero_()
            steps_since_log = 0
            clock = time.perf_counter()
        paused = time.perf_counter()
        if on_report is not None and procs.is_main and (done % cfg.eval_every == 0 or done == cfg.max_steps):
            shown.update(on_report(done))
            bar.set_postfix(shown)
        if on_checkpoint is not None and (done % cfg.checkpoint_every == 0 or done == end):
            _require_finite(finite, done)
            on_checkpoint(done)
        clock += time.perf_counter() - paused  # the pause doesn't count against tokens/s
    bar.close()
