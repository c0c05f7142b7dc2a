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


def assert_stage_run_is_the_recipes(folder: Path, stage: str = "sft_skills", steps: int = 1200) -> None:
    """The committed ``done.json`` of ``folder/stage`` carries the chain hash of ``folder/recipe.json``'s
    last stage, and its training log has every step up to ``steps`` once (resumed or not)."""
    import json

    _, _, chain = recipe_chain(folder / "recipe.json")
    done = json.loads((folder / stage / "done.json").read_text())
    assert done["chain"] == chain[-1]
    logged = [json.loads(line) for line in (folder / stage / "train_log.jsonl").read_text().splitlines()]
    logged_steps = [r["step"] for r in logged if "loss" in r]
    assert max(logged_steps) == steps and len(logged_steps) == len(set(logged_steps))


def user_texts(conversations) -> list[str]:
    """Each conversation's user messages written as text, joined: where a request's values must appear."""
    return [" ".join(str(m["content"]) for m in c.messages if m["role"] == "user" and isinstance(m["content"], str))
            for c in conversations]


def assert_values_spoken(conversations) -> None:
    """Every argument value a conversation's calls need, and the name it must remember, is in the
    user's words as a user would write it: what no rewording of a request may lose."""
    from llmkit.course.toolgen import spoken

    for c, text in zip(conversations, user_texts(conversations)):
        for _, arguments in c.expected.calls:
            for value in arguments.values():
                assert spoken(value) in text, (text, value)
        if c.expected.name:
            assert c.expected.name in text


def skills_changes(path: Path) -> dict:
    """The settings in which an experiment's ``sft_skills`` differs from the main recipe's, after
    checking that the recipe is the main one up to that stage (same chain, so the shipped base) and
    ends there, with no setting missing."""
    names, main, main_chain = recipe_chain(MAIN_RECIPE)
    run_names, stages, chain = recipe_chain(path)
    assert run_names[-1] == "sft_skills" and run_names == names[:len(run_names)]
    assert chain[:-1] == main_chain[:len(run_names) - 1]
    shipped = main[names.index("sft_skills")]["settings"]
    settings = stages[-1]["settings"]
    assert set(shipped) <= set(settings)
    return {k: v for k, v in settings.items() if shipped.get(k) != v}


def assert_measured_as_the_shipped_skills_model(folder: Path, name: str) -> None:
    """``folder/results.json`` holds the one model ``name``, measured by ``word_base/compare.py`` on
    the same conversations as the shipped skills model in ``deeper/results.json``."""
    import json

    from llmkit.course.skills import EVAL_SPLITS, MIX

    results = json.loads((folder / "results.json").read_text())
    reference = json.loads((EXPERIMENTS / "deeper" / "results.json").read_text())
    shipped = reference["models"]["shipped"]
    assert set(results["models"]) == {name}
    for key in ("per_kind", "argument_conversations"):
        assert results[key] == reference[key]
    model = results["models"][name]
    for split in EVAL_SPLITS:
        assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)
        assert model["argument_copy"][split]["n"] == shipped["argument_copy"][split]["n"]
