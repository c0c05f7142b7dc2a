"""data/experiments/open_enums/: the committed run is the recipe here, its results compare like with like."""
import json

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "open_enums"


def test_the_committed_run_trained_the_stage_the_recipe_here_names():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe
    from llmkit.course.skills import MIX

    recipe = load_recipe(FOLDER / "recipe.json")
    settings = recipe["stages"][-1]["settings"]
    assert settings["open_framing"] is settings["open_enums"] is True
    assert {k: v for k, v in settings["mix"].items() if MIX[k] != v} == {"missing": 20, "chitchat": 10}
    done = json.loads((FOLDER / "sft_skills_open_enums" / "done.json").read_text())
    assert done["chain"] == chain_hashes(recipe["stages"])[-1] and done["figures"]["step"] == 1200
    main = load_recipe(FOLDER.parent.parent / "models" / "recipe.json")
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(main["stages"])[:len(recipe["stages"]) - 1]


def test_the_committed_results_compare_like_with_like():
    from llmkit.course.skills import MIX

    results = json.loads((FOLDER / "results.json").read_text())
    assert set(results["models"]) == {"shipped", "open_enums"}
    shipped_before = json.loads((EXPERIMENTS / "open_framing" / "results.json").read_text())["models"]["shipped"]
    assert results["models"]["shipped"]["evals"] == shipped_before["evals"]  # the same model measured again
    for model in results["models"].values():
        for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
            assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)
    by_source = json.loads((FOLDER / "by_source.json").read_text())
    assert by_source["group"] == "source" and set(by_source["models"]) == {"shipped", "open", "open_enums"}
    counts = [{split: {k: v["n"] for k, v in m[split].items()} for split in ("unseen_values", "unseen_tools")}
              for m in by_source["models"].values()]
    assert counts[0] == counts[1] == counts[2]
    assert set(counts[0]["unseen_tools"]) == {"enum", "pool", "corpus", "invented"}
