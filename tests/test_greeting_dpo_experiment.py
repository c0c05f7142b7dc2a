"""data/experiments/greeting_dpo/: the main recipe with greeting pairs in its DPO stage."""
import json

from experiment_script import EXPERIMENTS, MAIN_RECIPE, recipe_chain

FOLDER = EXPERIMENTS / "greeting_dpo"


def test_the_run_is_the_main_recipe_with_only_a_greeting_share_added_to_dpo():
    names, main, main_chain = recipe_chain(MAIN_RECIPE)
    run_names, stages, chain = recipe_chain(FOLDER / "recipe.json")
    assert run_names == names
    dpo = names.index("dpo")
    assert chain[:dpo] == main_chain[:dpo]  # it goes on from the shipped chain's sft_polish
    changed = {k: v for k, v in stages[dpo]["settings"].items() if main[dpo]["settings"].get(k) != v}
    assert changed == {"greetings": 0.15}
    assert [s["settings"] for s in stages[dpo + 1:]] == [s["settings"] for s in main[dpo + 1:]]


def test_the_committed_logs_are_this_runs():
    names, _, chain = recipe_chain(FOLDER / "recipe.json")
    for stage in ("dpo", "evals"):
        done = json.loads((FOLDER / stage / "done.json").read_text())
        assert done["chain"] == chain[names.index(stage)]
    report = json.loads((FOLDER / "evals" / "evals.json").read_text())
    measured = json.loads((FOLDER / "greeting.json").read_text())["models"]["greet_dpo"]
    for split in report:  # measure.py replays the evals stage's memory conversations
        assert measured[split]["memory"] == report[split]["memory"]
        assert measured[split]["greets_by_name"] == report[split]["greets_by_name"]
    assert measured["first_replies"]["unseen_phrasings_and_tools"]["counts"]["a refusal"] == 30
