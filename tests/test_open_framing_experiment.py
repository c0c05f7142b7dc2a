"""data/experiments/open_framing/by_style.py: each argument's style found, copying scored per style."""
from __future__ import annotations

import pytest

from experiment_script import load_experiment

pytestmark = pytest.mark.usefixtures("one_thread")


def _script():
    return load_experiment("open_framing", "by_style.py")


def test_style_of_names_the_style_a_value_was_said_in():
    style_of = _script().style_of
    assert style_of("Grab the tide level, given rate being 49. Thanks", "rate", 49) == "{words} being {value}"
    assert style_of("Find the bus fare; home city set to Oslo", "home_city", "Oslo") == "{words} set to {value}"
    assert style_of("the fee? using yes for the public", "public", True) == "using {value} for the {words}"
    assert style_of("the fee for Oslo please", "city", "Oslo") == "other"


def test_every_argument_of_the_evaluated_splits_has_a_listed_style():
    script = _script()
    from llmkit.course.skills import make_skills

    for split in script.SPLITS:
        for spec in make_skills(40, split=split, seed=script.SEED, kinds=script.KINDS):
            name, arguments = spec.expected.calls[0]
            for parameter, value in arguments.items():
                if not isinstance(value, bool):
                    assert script.style_of(script.request_text(spec), parameter, value) != "other", (split, name)


def test_request_text_is_the_turn_the_expected_call_answers():
    from llmkit.course.skills import make_skills

    errand = make_skills(1, split="seen", seed=3, kinds=["errands"])[0]
    typed = [m["content"] for m in errand.messages if m["role"] == "user" and isinstance(m["content"], str)]
    assert len(typed) >= 2 and _script().request_text(errand) == typed[-1]


def test_copy_by_style_scores_a_model(tiny_llama, tokenizer):
    from llmkit.course.skills import make_skills

    script = _script()
    model = tiny_llama(tokenizer.vocab_size, context_length=1024).eval()
    scores = script.copy_by_style(model, tokenizer, make_skills(6, split="unseen_phrasings_and_tools", seed=1,
                                                                kinds=script.KINDS))
    assert scores and sum(s["n"] for s in scores.values()) >= 6
    for s in scores.values():
        assert 0.0 <= s["all_right"] <= s["first_token"] <= 1.0


def test_the_committed_results_compare_like_with_like():
    import json

    from experiment_script import EXPERIMENTS
    from llmkit.course.skills import MIX

    folder = EXPERIMENTS / "open_framing"
    results = json.loads((folder / "results.json").read_text())
    assert set(results["models"]) == {"shipped", "open"}
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
        copies = [model["argument_copy"][split] for model in results["models"].values()]
        assert len({(c["n"], c["n_later"]) for c in copies}) == 1  # the same values asked of both
        for model in results["models"].values():
            assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)
    by_style = json.loads((folder / "by_style.json").read_text())
    shipped, opened = by_style["models"]["shipped"], by_style["models"]["open"]
    for split in _script().SPLITS:
        assert {k: v["n"] for k, v in shipped[split].items()} == {k: v["n"] for k, v in opened[split].items()}
        assert "other" not in shipped[split]


def test_the_committed_run_trained_the_stage_the_recipe_here_names():
    import json

    from experiment_script import EXPERIMENTS
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    folder = EXPERIMENTS / "open_framing"
    recipe = load_recipe(folder / "recipe.json")
    assert recipe["stages"][-1]["settings"]["open_framing"] is True
    done = json.loads((folder / "sft_skills_open" / "done.json").read_text())
    assert done["chain"] == chain_hashes(recipe["stages"])[-1]
    assert done["figures"]["step"] == 1200
    main = load_recipe(folder.parent.parent / "models" / "recipe.json")
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(main["stages"])[:len(recipe["stages"]) - 1]


def test_word_source_names_where_each_parameter_name_came_from():
    from llmkit.course.skills import make_skills
    from llmkit.course.toolgen import VOCABULARY

    script = _script()
    found = {}
    for spec in make_skills(150, split="unseen_tools", seed=script.SEED, kinds=script.KINDS):
        name, arguments = spec.expected.calls[0]
        schema = next(t for t in spec.tools if t.name == name).definition()["input_schema"]["properties"]
        for parameter, value in arguments.items():
            source = script.word_source(spec, parameter, value)
            found.setdefault(source, set()).add(parameter)
            assert (source == "enum") == ("enum" in schema[parameter])
    assert set(found) == {"enum", "pool", "corpus", "invented"}
    assert {"port", "venue", "nights"} & found["pool"]  # held-out pool names, not training ones
    assert all(p.split("_")[-1] in VOCABULARY["heldout"] for p in found["corpus"])
    assert not {p.split("_")[-1] for p in found["invented"]} & set(VOCABULARY["heldout"])
