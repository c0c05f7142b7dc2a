"""data/experiments/polish_open_talk/: polish_no_restart's schedule with open talk in the polish's training data."""
import json

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "polish_open_talk"
MAIN = EXPERIMENTS.parent / "models" / "recipe.json"


def _stages(path):
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(path)
    return [s["name"] for s in recipe["stages"]], recipe["stages"], chain_hashes(recipe["stages"])


def test_the_run_differs_from_the_main_recipe_only_in_the_polish():
    names, main, main_chain = _stages(MAIN)
    run_names, stages, chain = _stages(FOLDER / "recipe.json")
    assert run_names == names
    polish = names.index("sft_polish")
    assert chain[:polish] == main_chain[:polish]  # starts from the shipped skills model
    changed = {k: v for k, v in stages[polish]["settings"].items() if main[polish]["settings"].get(k) != v}
    assert changed == {"learning_rate": 1e-4, "warmup_steps": 0, "open_talk": True}
    assert [s["settings"] for s in stages[polish + 1:]] == [s["settings"] for s in main[polish + 1:]]


def test_it_is_polish_no_restart_plus_open_talk():
    no_restart = json.loads((EXPERIMENTS / "polish_no_restart" / "sft_polish.json").read_text())
    polish = json.loads((FOLDER / "sft_polish.json").read_text())
    assert {k: v for k, v in polish.items() if k != "open_talk"} == no_restart
    assert polish["open_talk"] is True
