"""data/experiments/sft_learning_rate/: the shipped skills stage at a third of the learning rate, run and measured
as the shipped skills model was."""
import json

from experiment_script import EXPERIMENTS, assert_stage_run_is_the_recipes

FOLDER = EXPERIMENTS / "sft_learning_rate"


def test_the_recipe_is_the_shipped_skills_stage_with_only_the_learning_rate_changed():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    main = load_recipe(FOLDER.parent.parent / "models" / "recipe.json")
    names = [stage["name"] for stage in recipe["stages"]]
    assert names[-1] == "sft_skills" and names == [s["name"] for s in main["stages"]][:len(names)]
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(main["stages"])[:len(names) - 1]
    settings = recipe["stages"][-1]["settings"]
    shipped = next(s for s in main["stages"] if s["name"] == "sft_skills")["settings"]
    changed = {k: v for k, v in settings.items() if shipped.get(k) != v}
    assert changed == {"learning_rate": 3e-4, "min_learning_rate": 3e-5}
    assert set(settings) == set(shipped)


def test_the_committed_run_is_the_recipe_here():
    assert_stage_run_is_the_recipes(FOLDER)


def test_the_committed_results_are_measured_as_the_shipped_skills_model_was():
    from llmkit.course.skills import EVAL_SPLITS, MIX

    results = json.loads((FOLDER / "results.json").read_text())
    shipped = json.loads((EXPERIMENTS / "deeper" / "results.json").read_text())
    assert set(results["models"]) == {"lower_lr"}
    for key in ("per_kind", "argument_conversations"):
        assert results[key] == shipped[key]
    model = results["models"]["lower_lr"]
    for split in EVAL_SPLITS:
        assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)
        assert model["argument_copy"][split]["n"] == shipped["models"]["shipped"]["argument_copy"][split]["n"]
