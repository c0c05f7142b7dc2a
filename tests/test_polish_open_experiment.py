"""data/experiments/polish_open/: polish_no_restart's schedule with open talk and open introductions in the polish's data."""
import json

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "polish_open"
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
    assert changed == {"learning_rate": 1e-4, "warmup_steps": 0, "open_talk": True,
                       "mix": {**main[polish]["settings"]["mix"], "memory_open": 6}}
    assert [s["settings"] for s in stages[polish + 1:]] == [s["settings"] for s in main[polish + 1:]]


def test_it_is_polish_no_restart_plus_open_talk_and_open_introductions():
    no_restart = json.loads((EXPERIMENTS / "polish_no_restart" / "sft_polish.json").read_text())
    polish = json.loads((FOLDER / "sft_polish.json").read_text())
    assert polish.pop("open_talk") is True and polish["mix"].pop("memory_open") == 6
    assert polish == no_restart
