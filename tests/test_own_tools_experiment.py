"""data/experiments/own_tools/: the main recipe with the own_tool kinds in sft_polish's mix; what each run logged."""
import json

from experiment_script import EXPERIMENTS, MAIN_RECIPE, recipe_chain

FOLDER = EXPERIMENTS / "own_tools"
SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")


def test_each_run_is_the_main_recipe_with_one_kind_added_to_the_polish_mix():
    from llmkit.course.skills import MIX

    names, main, main_chain = recipe_chain(MAIN_RECIPE)
    for recipe, kind in (("recipe.json", "own_tool"), ("recipe_open.json", "own_tool_open")):
        run_names, stages, chain = recipe_chain(FOLDER / recipe)
        assert run_names == names
        polish = names.index("sft_polish")
        assert chain[:polish] == main_chain[:polish]  # the shipped skills model, restored
        settings, main_settings = dict(stages[polish]["settings"]), dict(main[polish]["settings"])
        assert settings.pop("mix") == {**MIX, kind: 10}  # the default mix and the kind at 10
        main_settings.pop("mix", None)  # the main recipe may carry a kind of its own in the mix
        assert settings == main_settings
        assert [s["settings"] for s in stages[polish + 1:]] == [s["settings"] for s in main[polish + 1:]]


def test_the_committed_logs_are_the_pools_runs():
    names, _, chain = recipe_chain(FOLDER / "recipe.json")
    for stage in ("sft_polish", "dpo", "evals"):
        done = json.loads((FOLDER / "pools" / stage / "done.json").read_text())
        assert done["chain"] == chain[names.index(stage)]
    report = json.loads((FOLDER / "pools" / "evals" / "evals.json").read_text())
    assert set(report) == set(SPLITS)
    assert all(report[split]["n_right_tool"] == 1000 for split in SPLITS)  # 100 per kind of the ten in the mix


def test_the_committed_open_logs_are_the_open_runs_and_its_trial_is_scored():
    names, _, chain = recipe_chain(FOLDER / "recipe_open.json")
    for stage in ("sft_polish", "dpo"):
        done = json.loads((FOLDER / "open" / stage / "done.json").read_text())
        assert done["chain"] == chain[names.index(stage)]
    for trial in (FOLDER / "open" / "learner_trial.json", FOLDER / "pools" / "learner_trial.json"):
        report = json.loads(trial.read_text())
        assert report["right_calls"] == sum(case["right_calls"] for case in report["cases"])
    results = json.loads((FOLDER / "results_open.json").read_text())["models"]["open"]
    assert set(results["own_tool_open"]) == set(SPLITS) and set(results["own_tool"]) == set(SPLITS)


def test_the_shipped_chat_model_is_the_open_recipes_and_the_open_recipe_is_the_main_one():
    """The chat model shipped now came from recipe_open.json, whose polish mix the main recipe took."""
    names, _, chain = recipe_chain(FOLDER / "recipe_open.json")
    assert chain == recipe_chain(MAIN_RECIPE)[2]
    shipped = EXPERIMENTS.parent / "models" / "chat" / "stages"
    for stage in ("sft_polish", "dpo", "evals"):
        assert json.loads((shipped / stage / "done.json").read_text())["chain"] == chain[names.index(stage)]
    results = json.loads((FOLDER / "results_chat.json").read_text())["models"]["chat"]
    assert set(results["own_tool_open"]) == set(SPLITS) and set(results["own_tool"]) == set(SPLITS)
