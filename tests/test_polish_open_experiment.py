"""data/experiments/polish_open/: polish_no_restart's schedule with open talk and open introductions in the polish's data."""
import json

from experiment_script import EXPERIMENTS, MAIN_RECIPE, polish_changes, recipe_chain

FOLDER = EXPERIMENTS / "polish_open"


def test_the_run_differs_from_the_main_recipe_only_in_the_polish():
    main_mix = json.loads((MAIN_RECIPE.parent / "recipe" / "sft_polish.json").read_text())["mix"]
    assert polish_changes(FOLDER / "recipe.json") == {"learning_rate": 1e-4, "warmup_steps": 0, "open_talk": True,
                                                      "mix": {**main_mix, "memory_open": 6}}


def test_it_is_polish_no_restart_plus_open_talk_and_open_introductions():
    no_restart = json.loads((EXPERIMENTS / "polish_no_restart" / "sft_polish.json").read_text())
    polish = json.loads((FOLDER / "sft_polish.json").read_text())
    assert polish.pop("open_talk") is True and polish["mix"].pop("memory_open") == 6
    assert polish == no_restart


def test_the_committed_logs_are_this_runs():
    names, _, chain = recipe_chain(FOLDER / "recipe.json")
    for stage in ("sft_polish", "dpo", "evals"):
        done = json.loads((FOLDER / stage / "done.json").read_text())
        assert done["chain"] == chain[names.index(stage)]
    log = [json.loads(line) for line in (FOLDER / "sft_polish" / "train_log.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in log if row["kind"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == 1000  # resumed once, no step logged twice
    report = json.loads((FOLDER / "evals" / "evals.json").read_text())
    measured = json.loads((FOLDER / "greeting.json").read_text())["models"]["open"]
    for split in report:  # measure.py replays the evals stage's memory conversations
        assert measured[split]["memory"] == report[split]["memory"]
        assert measured[split]["greets_by_name"] == report[split]["greets_by_name"]
