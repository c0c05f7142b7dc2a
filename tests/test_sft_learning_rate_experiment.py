"""data/experiments/sft_learning_rate/: the shipped skills stage at a third of the learning rate, run and measured
as the shipped skills model was."""
from experiment_script import (EXPERIMENTS, assert_measured_as_the_shipped_skills_model,
                               assert_stage_run_is_the_recipes, skills_changes)

FOLDER = EXPERIMENTS / "sft_learning_rate"


def test_the_recipe_is_the_shipped_skills_stage_with_only_the_learning_rate_changed():
    assert skills_changes(FOLDER / "recipe.json") == {"learning_rate": 3e-4, "min_learning_rate": 3e-5}


def test_the_committed_run_is_the_recipe_here():
    assert_stage_run_is_the_recipes(FOLDER)


def test_the_committed_results_are_measured_as_the_shipped_skills_model_was():
    assert_measured_as_the_shipped_skills_model(FOLDER, "lower_lr")
