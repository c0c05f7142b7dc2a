"""Load a script under data/experiments/ as a module, so tests can call its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parent.parent / "data" / "experiments"


def load_experiment(name: str, script: str) -> ModuleType:
    """``data/experiments/<name>/<script>`` as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"{name}_{Path(script).stem}", EXPERIMENTS / name / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


MAIN_RECIPE = EXPERIMENTS.parent / "models" / "recipe.json"


def recipe_chain(path: Path) -> tuple[list[str], list[dict], list[str]]:
    """A recipe's stage names, its stages (each with its config's settings) and their chain hashes,
    for tests that check an experiment's recipe against the main one."""
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(path)
    return [s["name"] for s in recipe["stages"]], recipe["stages"], chain_hashes(recipe["stages"])


def polish_changes(path: Path) -> dict:
    """The settings in which an experiment's ``sft_polish`` differs from the main recipe's, after
    checking that it starts from the main recipe's skills model (the same chain up to the polish)
    and ends with the main recipe's later stages."""
    names, main, main_chain = recipe_chain(MAIN_RECIPE)
    run_names, stages, chain = recipe_chain(path)
    assert run_names == names
    polish = names.index("sft_polish")
    assert chain[:polish] == main_chain[:polish]
    assert [s["settings"] for s in stages[polish + 1:]] == [s["settings"] for s in main[polish + 1:]]
    return {k: v for k, v in stages[polish]["settings"].items() if main[polish]["settings"].get(k) != v}
