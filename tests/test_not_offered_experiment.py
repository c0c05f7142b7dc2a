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


def test_the_committed_run_is_the_recipe_here():
    import json

    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    done = json.loads((FOLDER / "sft_skills" / "done.json").read_text())
    assert done["chain"] == chain_hashes(load_recipe(FOLDER / "recipe.json")["stages"])[-1]
    logged = [json.loads(line) for line in (FOLDER / "sft_skills" / "train_log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in logged) == done["figures"]["step"] == 1200


def test_the_committed_results_measure_what_open_talks_measured():
    import json

    from llmkit.course.skills import EVAL_SPLITS, MIX

    results = json.loads((FOLDER / "results.json").read_text())
    before = json.loads((EXPERIMENTS / "open_talk" / "results.json").read_text())
    assert set(results["models"]) == {"not_offered"} and results["per_kind"] == before["per_kind"]
    for split in EVAL_SPLITS:
        ours, theirs = results["models"]["not_offered"], before["models"]["open_talk"]
        assert ours["evals"][split]["n_right_tool"] == theirs["evals"][split]["n_right_tool"] == 50 * len(MIX)
        assert ours["argument_copy"][split]["n"] == theirs["argument_copy"][split]["n"]  # the same values asked
    due = json.loads((FOLDER / "calls_due.json").read_text())
    assert set(due["models"]) == {"open_talk", "not_offered"} and "not_offered" in due["kinds"]
    earlier = json.loads((EXPERIMENTS / "open_talk" / "calls_due.json").read_text())["models"]["open_talk"]
    split = "unseen_phrasings_and_tools"
    for kind, outcomes in earlier[split].items():  # the open_talk model, measured again beside a new kind
        assert due["models"]["open_talk"][split][kind] == outcomes
