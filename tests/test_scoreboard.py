"""data/experiments/scoreboard.py: every model's recorded evals, read back as recorded, beside the targets."""
import importlib.util
import json

from experiment_script import EXPERIMENTS


def scoreboard():
    """data/experiments/scoreboard.py as a fresh module."""
    spec = importlib.util.spec_from_file_location("scoreboard", EXPERIMENTS / "scoreboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_chat_model_comes_first_with_its_own_figures():
    board = scoreboard()
    label, evals = board.measured_models()[0]
    assert label.startswith("data/models/chat")
    shipped = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())
    row = board.row(label, evals, "unseen_phrasings_and_tools")
    assert row["conversations"] == shipped["unseen_phrasings_and_tools"]["n_right_tool"]
    assert row["args_exact"] == shipped["unseen_phrasings_and_tools"]["args_exact"]


def test_every_compared_model_is_a_row():
    board = scoreboard()
    labels = [label for label, _ in board.measured_models()]
    for results in EXPERIMENTS.glob("*/results.json"):
        recorded = json.loads(results.read_text())
        models = recorded.get("models") or recorded.get("modes") or {}
        for name, measured in models.items():
            if "evals" in measured:
                assert f"{results.parent.name}/results:{name}" in labels


def test_records_are_found_wherever_they_nest_and_stage_summaries_are_skipped(tmp_path):
    board = scoreboard()
    scores = {"args_exact": 0.5, "n_right_tool": 10, "kinds": {}, **{k: 0.5 for k in board.TARGETS}}
    evals = {split: dict(scores) for split in board.SPLITS}
    (tmp_path / "run" / "evals").mkdir(parents=True)
    (tmp_path / "run" / "results.json").write_text(json.dumps({"models": {"a": {"evals": evals}, "b": {"x": 1}}}))
    (tmp_path / "run" / "evals" / "evals.json").write_text(json.dumps(evals))
    (tmp_path / "run" / "evals" / "done.json").write_text(json.dumps({"evals": evals}))
    one_kind = {split: {k: v for k, v in scores.items() if k != "kinds"} for split in board.SPLITS}
    (tmp_path / "run" / "own.json").write_text(json.dumps({"models": {"c": {"own_tool": one_kind}}}))
    labels = [label for label, _ in board.measured_models(tmp_path)]
    assert labels[1:] == ["run/evals/evals", "run/results:a"]


def test_best_is_the_highest_recorded_figure_and_the_table_ends_with_the_targets():
    board = scoreboard()
    rows = [board.row(label, evals, "unseen_phrasings_and_tools") for label, evals in board.measured_models()]
    best = board.best(rows)
    assert best["args_exact"] == max(r["args_exact"] for r in rows)
    text = board.table(rows, "unseen_phrasings_and_tools").splitlines()
    assert len(text) == len(rows) + 4 and text[-1].startswith("| **issue 13's target**")
    assert "| 0.90 |" in text[-1] and text[-1].endswith("| 7 |")
    met = [int(line.rsplit("|", 2)[1]) for line in text[2:-2]]
    assert met == [len(board.targets_met(r)) for r in rows]


def test_a_target_is_met_at_or_above_it_and_a_missing_score_meets_none():
    board = scoreboard()
    scores = {name: target for name, target in board.TARGETS.items()}
    scores["args_exact"], scores["memory"] = 0.89, None
    assert set(board.targets_met(scores)) == set(board.TARGETS) - {"args_exact", "memory"}


def test_the_readme_shows_the_table_the_script_prints_now():
    board = scoreboard()
    rows = [board.row(label, evals, "unseen_phrasings_and_tools") for label, evals in board.measured_models()]
    assert board.table(rows, "unseen_phrasings_and_tools") in (EXPERIMENTS / "README.md").read_text()
