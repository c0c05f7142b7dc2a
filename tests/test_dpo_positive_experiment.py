"""data/experiments/dpo_positive/: the main chat chain with DPO-Positive, with plain DPO re-run and
logged, and without DPO; what each measured."""
import json

import pytest

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "dpo_positive"
MAIN = EXPERIMENTS.parent / "models" / "recipe.json"
SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")


def _recipes():
    from llmkit.course.recipe_stages import load_recipe

    return load_recipe(MAIN), load_recipe(FOLDER / "recipe.json"), load_recipe(FOLDER / "recipe_no_dpo.json")


def test_the_recipe_is_the_main_one_with_dpo_positive_and_nothing_else():
    from llmkit.course.recipe_stages import chain_hashes

    main, positive, _ = _recipes()
    names = [s["name"] for s in positive["stages"]]
    assert names == [s["name"] for s in main["stages"]]
    dpo = names.index("dpo")
    assert chain_hashes(positive["stages"])[:dpo] == chain_hashes(main["stages"])[:dpo]
    settings, main_settings = positive["stages"][dpo]["settings"], main["stages"][dpo]["settings"]
    assert {k: v for k, v in settings.items() if main_settings.get(k) != v} == {"positive_weight": 50.0}
    assert json.loads((FOLDER / "dpo" / "done.json").read_text())["chain"] == chain_hashes(positive["stages"])[dpo]


def test_the_no_dpo_recipe_is_the_main_one_without_its_dpo_stage():
    from llmkit.course.recipe_stages import chain_hashes

    main, _, no_dpo = _recipes()
    names = [s["name"] for s in no_dpo["stages"]]
    assert names == [s["name"] for s in main["stages"] if s["kind"] != "dpo"]
    polish = names.index("sft_polish")
    assert chain_hashes(no_dpo["stages"])[: polish + 1] == chain_hashes(main["stages"])[: polish + 1]
    assert no_dpo["stages"][-1]["settings"] == main["stages"][-1]["settings"]  # the same evals


def test_the_plain_dpo_rerun_is_the_shipped_chat_models_dpo_stage():
    """recipe_plain_dpo.json is the recipe with the DPO config that made the shipped chat model
    (`dpo_plain.json`, kept here so the experiments that used it keep their hashes when the main
    recipe moves on): the same chain, and the same held-out figures at every report, so the logged
    rewards belong to the DPO that made the shipped chat model."""
    from llmkit.course.recipe_stages import chain_hashes, load_recipe
    from llmkit.training.checkpoint import read_log

    main, _, _ = _recipes()
    plain = load_recipe(FOLDER / "recipe_plain_dpo.json")
    dpo = [s["name"] for s in plain["stages"]].index("dpo")
    assert chain_hashes(plain["stages"])[:dpo] == chain_hashes(main["stages"])[:dpo]
    assert json.loads((FOLDER / "plain_dpo" / "done.json").read_text())["chain"] == chain_hashes(plain["stages"])[dpo]
    shipped_done = EXPERIMENTS.parent / "models" / "chat" / "stages" / "dpo" / "done.json"
    assert json.loads(shipped_done.read_text())["chain"] == chain_hashes(plain["stages"])[dpo]
    rerun = [r for r in read_log(FOLDER / "plain_dpo" / "train_log.jsonl") if r["kind"] == "eval"]
    shipped = [r for r in read_log(shipped_done.with_name("train_log.jsonl")) if r["kind"] == "eval"]
    assert [r["step"] for r in rerun] == [r["step"] for r in shipped]
    for mine, theirs in zip(rerun, shipped):
        assert mine["heldout_loss"] == pytest.approx(theirs["heldout_loss"], abs=2e-3)
    assert rerun[0]["heldout_chosen_reward"] == pytest.approx(0.0, abs=1e-3)  # the policy starts as the reference
    assert rerun[-1]["heldout_chosen_reward"] < 0 < rerun[-1]["heldout_reward_accuracy"]


def test_the_committed_evals_score_the_shipped_models_conversations():
    shipped = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())
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


def test_the_staged_chat_model_is_this_recipes_and_says_where_it_came_from():
    """Its stage files carry this recipe's chain hashes (so once the main recipe's dpo.json takes
    positive_weight, they are the main recipe's), its evals are the ones committed here, and its
    run configs and logs name the recipe's run folder, not a machine's."""
    from llmkit.course.recipe_stages import chain_hashes

    _, positive, _ = _recipes()
    staged = EXPERIMENTS.parent / "models" / "staged" / "chat"
    chains = dict(zip([s["name"] for s in positive["stages"]], chain_hashes(positive["stages"])))
    for stage in ("sft_polish", "dpo", "evals"):
        assert json.loads((staged / "stages" / stage / "done.json").read_text())["chain"] == chains[stage]
    assert (json.loads((staged / "stages" / "evals" / "evals.json").read_text())
            == json.loads((FOLDER / "evals" / "evals.json").read_text()))
    for stage, config in (("sft_polish", "sft_config.json"), ("dpo", "dpo_config.json")):
        settings = json.loads((staged / "stages" / stage / config).read_text())
        assert settings["out_dir"] == f"{positive['out_dir']}/{stage}"  # the recipe's folder, not a machine's
        assert settings["base_model"].startswith(f"{positive['out_dir']}/")
        log = (staged / "stages" / stage / "stage.log").read_text(encoding="utf-8")
        assert f" from {positive['out_dir']}/" in log


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
    kinds = table.kind_table({"shipped": shipped}, "unseen_phrasings_and_tools")
    assert any(r.startswith("| tool |") for r in kinds) and not any(r.startswith("| memory |") for r in kinds)
