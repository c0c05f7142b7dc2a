"""data/experiments/deeper/: the recipe grows the shipped base, first_token.py sorts a miss right."""
from __future__ import annotations

import json

import pytest

from experiment_script import EXPERIMENTS, load_experiment

FOLDER = EXPERIMENTS / "deeper"


def test_the_recipe_grows_the_shipped_base_and_fine_tunes_it_as_the_shipped_run_did():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    main = load_recipe(FOLDER.parent.parent / "models" / "recipe.json")
    names = [stage["name"] for stage in recipe["stages"]]
    assert names[-2:] == ["pretrain_deeper", "sft_skills"]
    shared = names.index("pretrain") + 1
    assert chain_hashes(recipe["stages"])[:shared] == chain_hashes(main["stages"])[:shared]
    deeper = recipe["stages"][-2]["settings"]
    assert deeper["grow_from"] == "pretrain" and deeper["model"]["n_layers"] == 8
    shipped_base = next(s for s in main["stages"] if s["name"] == "pretrain")["settings"]["model"]
    assert {k for k, v in deeper["model"].items() if shipped_base[k] != v} == {"n_layers"}
    shipped_skills = next(s for s in main["stages"] if s["name"] == "sft_skills")["settings"]
    assert recipe["stages"][-1]["settings"] == shipped_skills


@pytest.mark.usefixtures("one_thread")
def test_a_missed_first_token_is_sorted_by_where_the_prompt_holds_it():
    script = load_experiment("deeper", "first_token.py")
    from llmkit.chat.template import render
    from llmkit.course.skills import make_skills
    from llmkit.tokens.tokenizer import Tokenizer
    from llmkit.paths import data_path

    tokenizer = Tokenizer.load(data_path("models", "skills", "tokenizer.json"))
    spec = make_skills(1, split="seen", seed=2, kinds=["weather"])[0]
    ids = spec.render(tokenizer).ids
    _, _, positions, group = next(script.argument_values(tokenizer, [spec]))
    first = positions[0]
    assert group == "in_prompt" and script.miss_group(tokenizer, ids, first, ids[first]) == "right"
    request = script.user_message_span(tokenizer, ids, first)
    other_word = next(ids[i] for i in request if ids[i] != ids[first])
    assert script.miss_group(tokenizer, ids, first, other_word) == "request_token"
    prompt_ids = render(tokenizer, spec.prompt, tools=spec.definitions or None, system=spec.system,
                        add_generation_prompt=False).ids
    tool_line_only = next(t for t in prompt_ids[:request.start] if t not in {ids[i] for i in request}
                          and t not in tokenizer.special_tokens.values())
    assert script.miss_group(tokenizer, ids, first, tool_line_only) == "elsewhere"
    unseen = next(t for t in range(tokenizer.vocab_size) if t not in ids[:first])
    assert script.miss_group(tokenizer, ids, first, unseen) == "not_in_prompt"


def test_the_committed_run_is_the_recipe_here():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    chains = chain_hashes(recipe["stages"])
    for stage, chain, steps in (("pretrain_deeper", chains[-2], 100), ("sft_skills", chains[-1], 1200)):
        done = json.loads((FOLDER / stage / "done.json").read_text())
        assert done["chain"] == chain
        logged = [json.loads(line) for line in (FOLDER / stage / "train_log.jsonl").read_text().splitlines()]
        assert max(r["step"] for r in logged) == steps


def test_the_committed_results_compare_like_with_like_and_agree_with_each_other():
    from llmkit.course.skills import EVAL_SPLITS, MIX

    results = json.loads((FOLDER / "results.json").read_text())
    assert set(results["models"]) == {"shipped", "deeper"}
    shipped_before = json.loads((EXPERIMENTS / "open_enums" / "results.json").read_text())["models"]["shipped"]
    assert results["models"]["shipped"]["evals"] == shipped_before["evals"]  # the same model measured again
    first = json.loads((FOLDER / "first_token.json").read_text())
    assert set(first["models"]) == set(results["models"])
    assert first["n"] == results["argument_conversations"]
    for name, model in results["models"].items():
        for split in EVAL_SPLITS:
            assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)
            counts, copy = first["models"][name][split], model["argument_copy"][split]
            # two scripts, one set of values: the same count, and the same share of first tokens right
            assert sum(counts.values()) == copy["n"]
            assert counts["right"] / copy["n"] == pytest.approx(copy["first_token"])
