"""Notebook 06's pictures of the shipped base model's training: its stages end to end.

The base model was made in three training stages (``data/models/recipe.json``): copy practice on
a 2-layer model, the same model grown to 6 layers and practising on, then pretraining on the
corpus. ``stage_curves`` lays their logs end to end (each stage starts from the weights the one
before it ended with); ``plot_copy_circuit`` draws copy accuracy, loss and held-out bits per byte
on that one step axis, so the copy circuit's slow start, its sudden arrival and its survival
through pretraining are visible in one figure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class StageCurve:
    """One training stage's points on the end-to-end step axis (``first_step`` is where it starts)."""

    name: str
    first_step: int
    last_step: int
    train_steps: list[int]
    train_loss: list[float]
    eval_steps: list[int]
    copy_accuracy: list[float]
    heldout_bpb: list[float]


def stage_curves(stages: Sequence[tuple[str, list[dict]]]) -> list[StageCurve]:
    """Each stage's train loss and eval points, its steps shifted to follow the stage before."""
    curves, offset = [], 0
    for name, log in stages:
        train = [r for r in log if r["kind"] == "train"]
        evals = [r for r in log if r["kind"] == "eval"]
        last = max((r["step"] for r in train + evals), default=0)
        curves.append(StageCurve(
            name=name, first_step=offset, last_step=offset + last,
            train_steps=[offset + r["step"] for r in train], train_loss=[r["loss"] for r in train],
            eval_steps=[offset + r["step"] for r in evals],
            copy_accuracy=[r.get("copy_accuracy", float("nan")) for r in evals],
            heldout_bpb=[r.get("heldout_bpb", float("nan")) for r in evals]))
        offset += last
    return curves


def plot_copy_circuit(stages: Sequence[tuple[str, list[dict]]], *, bpb_target: float | None = None):
    """Copy accuracy (top), training loss (middle) and held-out bits per byte (bottom) of every
    stage, end to end, each stage on its own shaded band. Returns the figure."""
    import matplotlib.pyplot as plt

    curves = stage_curves(stages)
    fig, (copy_ax, loss_ax, bpb_ax) = plt.subplots(3, 1, figsize=(10, 7.5), sharex=True)
    for index, curve in enumerate(curves):
        colour = f"C{index}"
        for ax in (copy_ax, loss_ax, bpb_ax):
            ax.axvspan(curve.first_step, curve.last_step, color=colour, alpha=0.07, lw=0)
        copy_ax.plot(curve.eval_steps, curve.copy_accuracy, "o-", color=colour, label=curve.name)
        loss_ax.plot(curve.train_steps, curve.train_loss, color=colour, lw=1, label=curve.name)
        bpb_ax.plot(curve.eval_steps, curve.heldout_bpb, "o-", color=colour, label=curve.name)
    if bpb_target is not None:
        bpb_ax.axhline(bpb_target, color="grey", ls=":", lw=1, label=f"target {bpb_target}")
    copy_ax.set(title="The copy circuit forms, then survives pretraining", ylabel="copy accuracy", ylim=(-0.03, 1.03))
    loss_ax.set(ylabel="training loss (nats/token)")
    bpb_ax.set(ylabel="held-out Shakespeare\n(bits per byte)", xlabel="optimizer step (stages end to end)")
    copy_ax.legend(loc="center right")
    bpb_ax.legend(loc="upper right")
    fig.tight_layout()
    return fig
