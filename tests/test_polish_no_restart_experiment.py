"""data/experiments/polish_no_restart/: the main recipe with sft_polish going on at sft_skills' last learning rate."""
import json

from experiment_script import EXPERIMENTS, polish_changes, recipe_chain

FOLDER = EXPERIMENTS / "polish_no_restart"


def test_the_run_is_the_main_recipe_with_only_the_polish_schedule_changed():
    assert polish_changes(FOLDER / "recipe.json") == {"learning_rate": 1e-4, "warmup_steps": 0}


def test_the_polish_starts_where_sft_skills_ended():
    skills = json.loads((EXPERIMENTS.parent / "models" / "recipe" / "sft_skills.json").read_text())
    polish = json.loads((FOLDER / "sft_polish.json").read_text())
    assert polish["learning_rate"] == skills["min_learning_rate"]  # no warm restart
    assert polish["warmup_steps"] == 0


def test_the_committed_logs_are_this_runs():
    names, _, chain = recipe_chain(FOLDER / "recipe.json")
    for stage in ("sft_polish", "dpo", "evals"):
        done = json.loads((FOLDER / stage / "done.json").read_text())
        assert done["chain"] == chain[names.index(stage)]
    report = json.loads((FOLDER / "evals" / "evals.json").read_text())
    assert set(report) == {"seen", "unseen_values", "unseen_phrasings_and_tools"}
    log = [json.loads(line) for line in (FOLDER / "sft_polish" / "train_log.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in log if row["kind"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == 1000  # resumed once, no step logged twice
    assert all(row["lr"] <= 1e-4 + 1e-9 for row in log if row["kind"] == "train")  # no warm restart

