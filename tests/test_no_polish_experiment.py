"""data/experiments/no_polish/: open_talk's chat chain without sft_polish, and what it measured."""
import json

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "no_polish"


def test_the_recipe_is_open_talks_chat_chain_without_the_polish():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    before = load_recipe(EXPERIMENTS / "open_talk" / "recipe_chat.json")
    names = [s["name"] for s in recipe["stages"]]
    assert names == [s["name"] for s in before["stages"] if s["name"] != "sft_polish"]
    skills = names.index("sft_skills")
    assert chain_hashes(recipe["stages"])[: skills + 1] == chain_hashes(before["stages"])[: skills + 1]
    dpo = names.index("dpo")
    assert recipe["stages"][dpo]["settings"] == before["stages"][dpo + 1]["settings"]  # the same DPO config
    assert json.loads((FOLDER / "dpo" / "done.json").read_text())["chain"] == chain_hashes(recipe["stages"])[dpo]


def test_the_committed_copying_uses_the_same_values_as_open_talks():
    report = json.loads((FOLDER / "chain_copy.json").read_text())
    chain = json.loads((EXPERIMENTS / "open_talk" / "chat" / "chain_copy.json").read_text())
    assert set(report["models"]) == {"open_talk_chat", "no_polish_chat"}
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
        assert {m[split]["n"] for m in report["models"].values()} == {chain["models"]["open_talk_skills"][split]["n"]}


def test_the_committed_evals_score_the_shipped_models_conversations():
    evals = json.loads((FOLDER / "evals" / "evals.json").read_text())
    shipped = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
        assert evals[split]["n_right_tool"] == shipped[split]["n_right_tool"]
        assert 0.0 <= evals[split]["args_exact"] <= 1.0
