"""data/experiments/dropout/: the shipped skills stage with dropout 0.1, its run and results are the recipe's."""
import json

from experiment_script import EXPERIMENTS, assert_stage_run_is_the_recipes

FOLDER = EXPERIMENTS / "dropout"


def test_the_recipe_is_the_shipped_skills_stage_with_only_dropout_changed():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    main = load_recipe(FOLDER.parent.parent / "models" / "recipe.json")
    names = [stage["name"] for stage in recipe["stages"]]
    assert names[-1] == "sft_skills" and names == [s["name"] for s in main["stages"]][:len(names)]
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(main["stages"])[:len(names) - 1]
    settings = recipe["stages"][-1]["settings"]
    shipped = next(s for s in main["stages"] if s["name"] == "sft_skills")["settings"]
    assert {k: v for k, v in settings.items() if shipped.get(k) != v} == {"dropout": 0.1}
    assert set(shipped) <= set(settings)


def test_the_committed_run_is_the_recipe_here():
    assert_stage_run_is_the_recipes(FOLDER)


def test_the_committed_results_are_measured_as_the_shipped_skills_model_was():
    from llmkit.course.skills import EVAL_SPLITS, MIX

    results = json.loads((FOLDER / "results.json").read_text())
    shipped = json.loads((EXPERIMENTS / "deeper" / "results.json").read_text())
    assert set(results["models"]) == {"dropout"} and "shipped" in shipped["models"]
    for key in ("per_kind", "argument_conversations"):
        assert results[key] == shipped[key]
    model = results["models"]["dropout"]
    for split in EVAL_SPLITS:
        assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)
        assert model["argument_copy"][split]["n"] == shipped["models"]["shipped"]["argument_copy"][split]["n"]


def test_the_first_tokens_sort_every_value_the_copy_score_counted():
    results = json.loads((FOLDER / "results.json").read_text())
    first = json.loads((FOLDER / "first_token.json").read_text())
    assert first["n"] == results["argument_conversations"] and set(first["models"]) == {"dropout"}
    for split, counts in first["models"]["dropout"].items():
        copy = results["models"]["dropout"]["argument_copy"][split]
        assert sum(counts.values()) == copy["n"]
        assert counts["right"] == round(copy["first_token"] * copy["n"])
