"""data/experiments/open_dpo/: the run is open_talk's chat chain with DPO pairs from the open data."""
import json

from experiment_script import EXPERIMENTS

FOLDER = EXPERIMENTS / "open_dpo"


def test_the_recipe_differs_from_open_talks_chat_chain_in_dpo_alone():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    before = load_recipe(EXPERIMENTS / "open_talk" / "recipe_chat.json")
    names = [s["name"] for s in recipe["stages"]]
    dpo = names.index("dpo")
    assert names == [s["name"] for s in before["stages"]]
    assert chain_hashes(recipe["stages"])[:dpo] == chain_hashes(before["stages"])[:dpo]
    settings, before_settings = recipe["stages"][dpo]["settings"], before["stages"][dpo]["settings"]
    assert {k: v for k, v in settings.items() if before_settings.get(k) != v} == {
        "open_framing": True, "open_enums": True, "open_talk": True}
    assert json.loads((FOLDER / "dpo" / "done.json").read_text())["chain"] == chain_hashes(recipe["stages"])[dpo]


def test_the_committed_copying_compares_the_two_dpo_models_on_the_same_values():
    report = json.loads((FOLDER / "chain_copy.json").read_text())
    assert set(report["models"]) == {"open_talk_chat", "open_dpo_chat"}
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
        assert len({m[split]["n"] for m in report["models"].values()}) == 1
