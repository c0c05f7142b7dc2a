"""data/experiments/open_talk/: the committed run is the recipe here, its results compare like with like."""
import json

import pytest

from experiment_script import EXPERIMENTS, load_experiment

FOLDER = EXPERIMENTS / "open_talk"


def test_the_recipe_is_the_open_enums_run_plus_open_talk():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    before = load_recipe(EXPERIMENTS / "open_enums" / "recipe.json")
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(before["stages"])[:-1]
    settings, before_settings = recipe["stages"][-1]["settings"], before["stages"][-1]["settings"]
    assert {k: v for k, v in settings.items() if before_settings.get(k) != v} == {"open_talk": True}


def test_the_committed_run_is_the_recipe_here():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe.json")
    done = json.loads((FOLDER / "sft_skills" / "done.json").read_text())
    assert done["chain"] == chain_hashes(recipe["stages"])[-1]
    logged = [json.loads(line) for line in (FOLDER / "sft_skills" / "train_log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in logged) == 1200


def test_the_committed_results_compare_like_with_like_and_agree_with_each_other():
    from llmkit.course.skills import EVAL_SPLITS, MIX

    results = json.loads((FOLDER / "results.json").read_text())
    assert set(results["models"]) == {"open_enums", "open_talk"}
    before = json.loads((EXPERIMENTS / "open_enums" / "results.json").read_text())["models"]["open_enums"]
    assert results["models"]["open_enums"]["evals"] == before["evals"]  # the same model measured again
    first = json.loads((FOLDER / "first_token.json").read_text())
    assert set(first["models"]) == set(results["models"]) and first["n"] == results["argument_conversations"]
    for model in results["models"].values():
        for split in EVAL_SPLITS:
            assert model["evals"][split]["n_right_tool"] == results["per_kind"] * len(MIX)


@pytest.mark.usefixtures("one_thread")
def test_a_request_token_is_sorted_into_talk_or_form_by_where_the_message_holds_it():
    script = load_experiment("open_talk", "by_piece.py")
    from llmkit.course.forced_scores import argument_values
    from llmkit.course.skills import make_skills
    from llmkit.paths import data_path
    from llmkit.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(data_path("models", "skills", "tokenizer.json"))
    split = "unseen_phrasings_and_tools"
    specs = [s for s in make_skills(200, split=split, seed=3, kinds=["weather"])
             if "much obliged" in str(s.messages[0]["content"]).lower()]
    _, ids, positions, _ = next(argument_values(tokenizer, specs[:1]))
    first = positions[0]
    request = script.first_token.user_message_span(tokenizer, ids, first)
    talk = script.talk_positions(tokenizer, ids, request, split)
    talk_text = tokenizer.decode([ids[i] for i in sorted(talk)]).lower()
    assert "obliged" in talk_text and first not in talk
    only_in_talk = next(ids[i] for i in sorted(talk) if all(j in talk for j in request if ids[j] == ids[i]))
    assert script.piece_group(tokenizer, ids, first, only_in_talk, split) == "talk"
    form_token = next(ids[i] for i in request if i not in talk and ids[i] != ids[first])
    assert script.piece_group(tokenizer, ids, first, form_token, split) == "form"
    assert script.piece_group(tokenizer, ids, first, ids[first], split) == "right"


def test_by_piece_splits_the_request_tokens_first_token_counted():
    first = json.loads((FOLDER / "first_token.json").read_text())["models"]
    first["shipped"] = json.loads((EXPERIMENTS / "deeper" / "first_token.json").read_text())["models"]["shipped"]
    by_piece = json.loads((FOLDER / "by_piece.json").read_text())["models"]
    assert set(by_piece) == set(first)
    for name, splits in first.items():
        for split, counts in splits.items():
            pieces = by_piece[name][split]
            assert pieces["talk"] + pieces["form"] == counts["request_token"]
            assert all(pieces[g] == counts[g] for g in ("right", "elsewhere", "not_in_prompt"))


def test_recipe_chat_goes_on_from_this_sft_skills_polishing_on_the_same_data():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    here, chat = load_recipe(FOLDER / "recipe.json"), load_recipe(FOLDER / "recipe_chat.json")
    main = load_recipe(FOLDER.parent.parent / "models" / "recipe.json")
    assert chain_hashes(chat["stages"])[:len(here["stages"])] == chain_hashes(here["stages"])
    later = chat["stages"][len(here["stages"]):]
    assert [s["name"] for s in later] == ["sft_polish", "dpo", "evals"]
    skills = here["stages"][-1]["settings"]
    data_settings = {k: skills[k] for k in ("open_framing", "open_enums", "open_talk", "mix")}
    for stage in later:
        in_main = next(s for s in main["stages"] if s["name"] == stage["name"])["settings"]
        if stage["name"] == "dpo":  # the main recipe's DPO as it was then (data/experiments/dpo_positive/dpo_plain.json)
            in_main = {k: v for k, v in in_main.items() if k != "positive_weight"}
        # polishing on the default data undid much of what sft_skills learnt (sft_polish_closed/)
        assert stage["settings"] == ({**in_main, **data_settings} if stage["name"] == "sft_polish" else in_main)


def test_the_closed_polish_log_is_the_main_polish_on_this_sft_skills():
    logged = [json.loads(line) for line in (FOLDER / "sft_polish_closed" / "train_log.jsonl").read_text().splitlines()]
    probes = [r for r in logged if "probe" in r]
    assert [r["step"] for r in probes] == list(range(0, 700, 100))  # stopped at step 620 of 1,000
    assert probes[0]["heldout_loss"] < probes[-1]["heldout_loss"]


def test_calls_due_sorts_a_conversation_by_what_the_model_did():
    import copy

    from llmkit.course.skills import make_skill, make_skills

    outcome = load_experiment("open_talk", "calls_due.py").outcome
    spec = make_skills(1, split="unseen_phrasings_and_tools", seed=4, kinds=["letters"])[0]
    perfect = copy.deepcopy(spec.messages[len(spec.prompt):])
    assert outcome(spec, perfect) == "valid"
    broken = copy.deepcopy(perfect)
    next(b for b in broken[0]["content"] if b["type"] == "tool_use")["input"] = {"no_such_parameter": 1}
    assert outcome(spec, broken) == "invalid"
    refusal = [{"role": "assistant", "content": "I can't tell you that: none of my tools gives the count."}]
    assert outcome(spec, refusal) == "refused"
    assert outcome(spec, [{"role": "assistant", "content": "There are 3."}]) == "other"
    missing = make_skill("missing", "seen", 0)
    assert outcome(missing, copy.deepcopy(missing.messages[len(missing.prompt):])) == "held_back"
    assert outcome(missing, perfect) == "called"


def test_the_committed_calls_due_count_the_conversations_compare_scored():
    due = json.loads((FOLDER / "calls_due.json").read_text())
    scored = {"shipped": json.loads((EXPERIMENTS / "word_base" / "results.json").read_text())["models"]["shipped"],
              **json.loads((FOLDER / "results.json").read_text())["models"]}
    assert set(due["models"]) == set(scored) and due["per_kind"] == 50
    for name, splits in due["models"].items():
        for split, kinds in splits.items():
            assert list(kinds) == due["kinds"]
            for kind, outcomes in kinds.items():
                assert sum(outcomes.values()) == due["per_kind"]
                if "valid" not in outcomes:
                    continue
                valid = scored[name]["evals"][split]["kinds"][kind]["tool_call_valid"] * due["per_kind"]
                if kind == "multi":  # tool_call_valid passes one valid call of two; "valid" wants both
                    assert outcomes["valid"] <= round(valid)
                else:
                    assert outcomes["valid"] == round(valid), (name, kind)


def test_calls_due_finds_the_form_a_request_was_written_from():
    from llmkit.course.phrasing import grammar
    from llmkit.course.skills import make_skills

    form_of = load_experiment("open_talk", "calls_due.py").form_of
    split = "unseen_phrasings_and_tools"
    forms = set(grammar("letters", split).forms)
    found = [form_of(spec.prompt[-1]["content"], "letters", split)
             for spec in make_skills(40, split=split, seed=3, kinds=["letters"])]
    assert set(found) - {"?"} <= forms and len(set(found)) >= 4
    assert found.count("?") <= 8  # a typo or shouted casing can hide a form, not most of them
    assert form_of("How many e's are in excellence?", "letters", split) == "?"  # a training form
    assert form_of("How many e's are in excellence?", "letters", "seen") == "How many {letter}'s are in {word}?"


def test_the_committed_forms_add_up_to_the_committed_outcomes():
    report = json.loads((FOLDER / "calls_by_form.json").read_text())
    for name, splits in report["models"].items():
        for split, kinds in splits.items():
            for kind, outcomes in kinds.items():
                per_form = report["by_form"][name][split][kind].values()
                assert {o: sum(f.get(o, 0) for f in per_form) for o in outcomes} == outcomes


def test_the_committed_chat_stages_are_recipe_chats():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe = load_recipe(FOLDER / "recipe_chat.json")
    chains = dict(zip((s["name"] for s in recipe["stages"]), chain_hashes(recipe["stages"])))
    for stage in ("sft_polish", "dpo"):
        assert json.loads((FOLDER / "chat" / stage / "done.json").read_text())["chain"] == chains[stage]
    evals = json.loads((FOLDER / "chat" / "evals" / "evals.json").read_text())
    shipped = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):  # the same conversations, so n agrees
        assert evals[split]["n_right_tool"] == shipped[split]["n_right_tool"]
        assert evals[split]["n_memory"] == shipped[split]["n_memory"]


def test_chain_copy_scores_each_model_on_the_same_conversations():
    report = json.loads((FOLDER / "chat" / "chain_copy.json").read_text())
    assert "chain_copy.py" in report["command"] and len(report["models"]) == 5
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
        assert len({m[split]["n"] for m in report["models"].values()}) == 1
        for figures in report["models"].values():
            assert 0.0 <= figures[split]["right"] <= figures[split]["first_token"] <= 1.0
    # the shipped chat model's row is what the chat README's own argument_copy command printed
    assert round(report["models"]["shipped_chat"]["unseen_phrasings_and_tools"]["right"], 2) == 0.55
    assert round(report["models"]["shipped_chat"]["seen"]["first_token"], 2) == 0.94


def test_the_chat_model_runs_add_up():
    due = json.loads((FOLDER / "chat" / "calls_due.json").read_text())
    for splits in due["models"].values():
        for kinds in splits.values():
            assert all(sum(outcomes.values()) == due["per_kind"] for outcomes in kinds.values())
    trial = json.loads((FOLDER / "chat" / "learner_trial.json").read_text())
    assert trial["right_calls"] == sum(case["right_calls"] for case in trial["cases"]) and trial["n"] == 11
