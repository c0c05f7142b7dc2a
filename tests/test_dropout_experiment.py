"""data/experiments/dropout/: the shipped skills stage with dropout 0.1, its run and results are the recipe's."""
import json

from experiment_script import (EXPERIMENTS, assert_measured_as_the_shipped_skills_model,
                               assert_stage_run_is_the_recipes, skills_changes)

FOLDER = EXPERIMENTS / "dropout"


def test_the_recipe_is_the_shipped_skills_stage_with_only_dropout_changed():
    assert skills_changes(FOLDER / "recipe.json") == {"dropout": 0.1}


def test_the_committed_run_is_the_recipe_here():
    assert_stage_run_is_the_recipes(FOLDER)


def test_the_committed_results_are_measured_as_the_shipped_skills_model_was():
    assert_measured_as_the_shipped_skills_model(FOLDER, "dropout")


def test_the_first_tokens_sort_every_value_the_copy_score_counted():
    results = json.loads((FOLDER / "results.json").read_text())
    first = json.loads((FOLDER / "first_token.json").read_text())
    assert first["n"] == results["argument_conversations"] and set(first["models"]) == {"dropout"}
    for split, counts in first["models"]["dropout"].items():
        copy = results["models"]["dropout"]["argument_copy"][split]
        assert sum(counts.values()) == copy["n"]
        assert counts["right"] == round(copy["first_token"] * copy["n"])
