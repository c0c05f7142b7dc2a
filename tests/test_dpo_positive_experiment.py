"""data/experiments/dpo_positive/: the chat chain with DPO-Positive (the main recipe's since), with
plain DPO rerun and logged, and without DPO; what each measured.

The main recipe has changed once since: its sft_polish mix gained own_tool_open
(data/experiments/own_tools/). These runs are the main recipe as it was before that, so they are
compared with the main recipe less that mix."""
import json

import pytest

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "dpo_positive"
MAIN = EXPERIMENTS.parent / "models" / "recipe.json"
SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")


def _main_before_own_tools():
    """The main recipe as these runs had it: sft_polish with the default mix (no ``mix`` setting)."""
    from llmkit.course.recipe_stages import load_recipe
    from llmkit.course.skills import MIX

    main = load_recipe(MAIN)
    polish = next(s for s in main["stages"] if s["name"] == "sft_polish")
    assert polish["settings"].pop("mix") == {**MIX, "own_tool_open": 10}
    return main


def _recipes():
    from llmkit.course.recipe_stages import load_recipe

    return _main_before_own_tools(), load_recipe(FOLDER / "recipe.json"), load_recipe(FOLDER / "recipe_no_dpo.json")


def test_the_recipe_is_the_main_one_and_its_dpo_is_dpo_positive():
    from llmkit.course.recipe_stages import chain_hashes

    main, positive, _ = _recipes()
    names = [s["name"] for s in positive["stages"]]
    assert names == [s["name"] for s in main["stages"]]
    assert chain_hashes(positive["stages"]) == chain_hashes(main["stages"])
    assert positive["stages"][names.index("dpo")]["settings"]["positive_weight"] == 50.0
    assert json.loads((FOLDER / "dpo" / "done.json").read_text())["chain"] == chain_hashes(main["stages"])[names.index("dpo")]


def test_the_no_dpo_recipe_is_the_main_one_without_its_dpo_stage():
    from llmkit.course.recipe_stages import chain_hashes

    main, _, no_dpo = _recipes()
    names = [s["name"] for s in no_dpo["stages"]]
    assert names == [s["name"] for s in main["stages"] if s["kind"] != "dpo"]
    polish = names.index("sft_polish")
    assert chain_hashes(no_dpo["stages"])[: polish + 1] == chain_hashes(main["stages"])[: polish + 1]
    assert no_dpo["stages"][-1]["settings"] == main["stages"][-1]["settings"]  # the same evals


def test_the_plain_dpo_rerun_is_the_main_recipes_dpo_before_positive_weight():
    """recipe_plain_dpo.json is the main recipe with the DPO config that made the chat model shipped
    before this one (`dpo_plain.json`): the same chain but for DPO-Positive's weight, and a log that
    starts at the reference and ends with the chosen answers below it."""
    from llmkit.course.recipe_stages import chain_hashes, load_recipe
    from llmkit.training.checkpoint import read_log

    main, _, _ = _recipes()
    plain = load_recipe(FOLDER / "recipe_plain_dpo.json")
    names = [s["name"] for s in plain["stages"]]
    assert names == [s["name"] for s in main["stages"]]
    dpo = names.index("dpo")
    assert chain_hashes(plain["stages"])[:dpo] == chain_hashes(main["stages"])[:dpo]
    assert {k: v for k, v in main["stages"][dpo]["settings"].items()
            if plain["stages"][dpo]["settings"].get(k) != v} == {"positive_weight": 50.0}
    assert json.loads((FOLDER / "plain_dpo" / "done.json").read_text())["chain"] == chain_hashes(plain["stages"])[dpo]
    rerun = [r for r in read_log(FOLDER / "plain_dpo" / "train_log.jsonl") if r["kind"] == "eval"]
    assert rerun[0]["heldout_loss"] == pytest.approx(0.6931, abs=1e-3)  # ln 2: the policy starts as the reference
    assert rerun[0]["heldout_chosen_reward"] == pytest.approx(0.0, abs=1e-3)
    assert rerun[-1]["heldout_chosen_reward"] < 0 < rerun[-1]["heldout_reward_accuracy"]


def test_the_committed_evals_score_the_shipped_models_conversations():
    shipped = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())  # the same evals stage
    for report in (FOLDER / "evals" / "evals.json", FOLDER / "no_dpo" / "evals.json"):
        evals = json.loads(report.read_text())
        for split in SPLITS:
            assert evals[split]["n_right_tool"] == shipped[split]["n_right_tool"]
            assert 0.0 <= evals[split]["args_exact"] <= 1.0


def test_the_committed_copying_scores_every_model_on_the_same_values():
    report = json.loads((FOLDER / "chain_copy.json").read_text())
    assert {"shipped_chat", "polish", "dpo_positive"} <= set(report["models"])
    for split in SPLITS:
        assert len({m[split]["n"] for m in report["models"].values()}) == 1


def test_the_no_dpo_evals_are_that_recipes_evals_stage():
    from llmkit.course.recipe_stages import chain_hashes

    _, _, no_dpo = _recipes()
    assert json.loads((FOLDER / "no_dpo" / "done.json").read_text())["chain"] == chain_hashes(no_dpo["stages"])[-1]


def test_the_chat_model_shipped_before_own_tools_was_this_recipes():
    """The DPO-Positive chat model was shipped (git history at 7d3dc00) until own_tools' replaced it:
    its evals, kept in own_tools/before/, are the ones committed here, and the model shipped now
    has this chain's stages up to sft_skills."""
    from llmkit.course.recipe_stages import chain_hashes

    _, positive, _ = _recipes()
    before = EXPERIMENTS / "own_tools" / "before" / "evals.json"
    assert json.loads(before.read_text()) == json.loads((FOLDER / "evals" / "evals.json").read_text())
    names = [s["name"] for s in positive["stages"]]
    chains = chain_hashes(positive["stages"])
    skills = EXPERIMENTS.parent / "models" / "skills" / "stages" / "sft_skills" / "done.json"
    assert json.loads(skills.read_text())["chain"] == chains[names.index("sft_skills")]


def test_evals_table_prints_each_reports_score_and_the_standard_error_of_the_difference():
    from experiment_script import load_experiment

    table = load_experiment("dpo_positive", "evals_table.py")
    shipped = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())
    positive = json.loads((FOLDER / "evals" / "evals.json").read_text())
    rows = table.split_table({"shipped": shipped, "positive": positive}, "unseen_phrasings_and_tools", with_se=True)
    right = next(r for r in rows if r.startswith("| right_tool |")).split("|")
    p1, p2, n = shipped["unseen_phrasings_and_tools"]["right_tool"], positive["unseen_phrasings_and_tools"]["right_tool"], 1000
    assert right[2].strip() == f"{p1:.2f} ({n})"
    assert right[3].strip() == f"{p2:.2f} ({n}) ±{((p1 * (1 - p1) + p2 * (1 - p2)) / n) ** 0.5:.2f}"
    assert table.difference_se(0.5, 0.5, 100) == pytest.approx(0.0707, abs=1e-4)
    newer = {split: {**figures, "greets_by_name": 0.25, "n_greets_by_name": 100} for split, figures in positive.items()}
    greets = [r for r in table.split_table({"shipped": shipped, "newer": newer}, "seen", with_se=True)
              if r.startswith("| greets_by_name |")]
    assert greets == ["| greets_by_name | - | 0.25 (100) |"]  # a score an older report lacks shows as "-"
    assert not any("greets_by_name" in r for r in table.split_table({"shipped": shipped}, "seen"))
    kinds = table.kind_table({"shipped": shipped}, "unseen_phrasings_and_tools")
    assert any(r.startswith("| tool |") for r in kinds) and not any(r.startswith("| memory |") for r in kinds)
