"""data/experiments/not_offered/: the run is open_talk's with part of `missing` given to `not_offered`."""
from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "not_offered"


def test_the_recipe_is_open_talks_with_the_same_share_of_refusals_half_of_them_contrasts():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe, before = load_recipe(FOLDER / "recipe.json"), load_recipe(EXPERIMENTS / "open_talk" / "recipe.json")
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(before["stages"])[:-1]
    settings, before_settings = recipe["stages"][-1]["settings"], before["stages"][-1]["settings"]
    assert {k for k, v in settings.items() if before_settings.get(k) != v} == {"mix"}
    mix, before_mix = settings["mix"], before_settings["mix"]
    assert {k: v for k, v in mix.items() if before_mix.get(k) != v} == {"missing": 12, "not_offered": 8}
    assert mix["missing"] + mix["not_offered"] == before_mix["missing"]  # as many refusals as before
