"""Notebook 06's stage curves: the shipped base model's training stages laid end to end."""
import math

import matplotlib

matplotlib.use("Agg")

import pytest

from llmkit.course.recipe import stage_logs
from llmkit.viz.pretraining import plot_copy_circuit, stage_curves


def stage_log(steps: int, copy: float) -> list[dict]:
    return ([{"kind": "train", "step": s, "loss": 8.0 - s / 100} for s in range(10, steps + 1, 10)]
            + [{"kind": "eval", "step": s, "heldout_bpb": 5.0, "copy_accuracy": copy} for s in (0, steps)])


def test_each_stage_starts_where_the_one_before_ended():
    curves = stage_curves([("warmup", stage_log(200, 0.05)), ("grown", stage_log(100, 0.9)),
                           ("pretrain", [{"kind": "eval", "step": 0, "heldout_bpb": 3.0}] + stage_log(50, 0.9)[:5])])
    assert [(c.first_step, c.last_step) for c in curves] == [(0, 200), (200, 300), (300, 350)]
    assert curves[1].eval_steps == [200, 300] and curves[1].train_steps[0] == 210
    assert curves[1].copy_accuracy == [0.9, 0.9]
    assert math.isnan(curves[2].copy_accuracy[0])  # an eval without the figure is a gap, not a zero


def test_the_plot_has_three_labelled_panels():
    fig = plot_copy_circuit([("warmup", stage_log(200, 0.05)), ("grown", stage_log(100, 0.9))], bpb_target=1.99)
    titles_and_labels = [(ax.get_title(), ax.get_ylabel()) for ax in fig.axes]
    assert len(fig.axes) == 3 and titles_and_labels[0][0] and all(label for _, label in titles_and_labels)
    assert fig.axes[2].get_xlabel()


def test_a_model_without_stages_says_how_to_ship_it(tmp_path):
    (tmp_path / "base").mkdir()
    with pytest.raises(FileNotFoundError, match="--ship base"):
        stage_logs(tmp_path / "base")
