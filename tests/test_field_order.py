"""llmkit.course.field_order: the two field orders ask the same questions, held-out questions are never
training questions, the constraint lets both orders' answers through (and scores them), and a quick
run of data/experiments/field_order/build.py writes results.json."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llmkit.chat.constrained import call_matcher
from llmkit.chat.markers import marker_ids
from llmkit.chat.template import render
from llmkit.chat.tool_signature import tool_definitions
from llmkit.course.conversation_data import split_of
from llmkit.course.field_order import (COUNT_RANGE, DETAIL_FIGURES, FIELDS, NUMBER_RANGE, ORDERS, FieldOrderSettings,
                                       combine_runs, evaluate, field_order_examples, field_order_items, last_sum,
                                       max_reply_tokens, numbers_text, running_sums, steps_right)
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.model.weights import read_config, save as save_weights
from llmkit.paths import data_path
from llmkit.training.config import InvalidConfig
from scripted_model import ScriptedModel

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "data" / "experiments" / "field_order" / "build.py"


def call_text(item) -> str:
    """The call exactly as the chat template writes the trained answer."""
    block = item.messages[-1]["content"][0]
    return json.dumps({"name": block["name"], "input": block["input"]})


# ------------------------------------------------------------------------------------------ the data
def test_both_orders_ask_the_same_questions_and_differ_only_in_field_order():
    evidence = field_order_items("evidence_first", 40, "train", seed=5)
    conclusion = field_order_items("conclusion_first", 40, "train", seed=5)
    for a, b in zip(evidence, conclusion):
        assert a.messages[0] == b.messages[0]
        assert a.expected.facts == b.expected.facts
        for item, order in ((a, "evidence_first"), (b, "conclusion_first")):
            assert tuple(item.expected.tool_input) == FIELDS[order]
            assert tuple(item.tools[0]["input_schema"]["properties"]) == FIELDS[order]
    assert a.expected.tool_input == dict(reversed(list(b.expected.tool_input.items())))


def test_the_evidence_adds_up_to_the_total():
    for item in field_order_items("evidence_first", 200, "train", seed=1):
        facts = item.expected.facts
        assert COUNT_RANGE[0] <= len(facts["numbers"]) <= COUNT_RANGE[1]
        assert all(NUMBER_RANGE[0] <= n <= NUMBER_RANGE[1] for n in facts["numbers"])
        assert facts["total"] == sum(facts["numbers"]) == last_sum(facts["running"])
        added = [int(step.split("=")[0].lstrip("+")) for step in facts["running"].split()]
        assert added == facts["numbers"]  # each step names the number it adds, in the question's order
        assert numbers_text(facts["numbers"]) in item.messages[0]["content"]


def test_longer_lists_on_request_and_the_reply_budget_grows_with_them():
    items = field_order_items("evidence_first", 200, "heldout", seed=2, count_range=(7, 10))
    counts = {len(item.expected.facts["numbers"]) for item in items}
    assert counts == {7, 8, 9, 10}
    assert all(split_of(numbers_text(item.expected.facts["numbers"])) == "heldout" for item in items)
    assert max_reply_tokens(10) > max_reply_tokens(COUNT_RANGE[1])
    with pytest.raises(ValueError, match="most numbers"):
        FieldOrderSettings(count_range=(6, 3))
    with pytest.raises(ValueError, match="fewest numbers"):
        field_order_items("evidence_first", 1, "train", seed=0, count_range=(1, 4))
    assert running_sums([3, 7, 2, 9]) == "3 +7=10 +2=12 +9=21"
    assert last_sum("3 +7=") is None
    assert steps_right("3 +7=10 +2=13", "3 +7=10 +2=12 +9=21") == 0.5 and steps_right(None, "3") == 0.0


def test_heldout_questions_are_never_training_questions():
    train = {numbers_text(c.expected.facts["numbers"]) for seed in range(30)
             for c in field_order_items("evidence_first", 32, "train", seed)}
    heldout = {numbers_text(c.expected.facts["numbers"])
               for c in field_order_items("evidence_first", 300, "heldout", seed=0)}
    assert len(heldout) > 250 and len(train) > 800  # mostly new lists, not a few repeated
    assert not train & heldout
    assert {split_of(text) for text in heldout} == {"heldout"}


def test_the_examples_function_is_seeded_and_fits_the_course_context(tokenizer):
    examples = field_order_examples("conclusion_first")
    assert [c.messages for c in examples(8, "train", 3)] == [c.messages for c in examples(8, "train", 3)]
    assert [c.messages for c in examples(8, "train", 3)] != [c.messages for c in examples(8, "train", 4)]
    longest = max(len(c.render(tokenizer)) for c in examples(64, "train", 0))
    assert longest <= read_config(data_path("models", "base")).context_length + 1


def test_bad_orders_and_splits_are_refused_with_the_choices_named():
    with pytest.raises(ValueError, match="evidence_first"):
        field_order_examples("total_first")
    with pytest.raises(ValueError, match="heldout"):
        field_order_items("evidence_first", 2, "test", 0)
    with pytest.raises(ValueError, match="heldout must be at least 1"):
        FieldOrderSettings(heldout=0)
    with pytest.raises(InvalidConfig, match="max_steps"):
        FieldOrderSettings(steps=0)


# ------------------------------------------------------------------------------------------ constraint and scoring
@pytest.mark.parametrize("order", ORDERS)
def test_the_constraint_accepts_the_trained_answer_of_either_order(order):
    item = field_order_items(order, 1, "heldout", 0)[0]
    matcher = call_matcher(tool_definitions(item.tools))
    assert matcher.accepts(call_text(item).encode())
    wrong_type = call_text(item).replace(f'"total": {item.expected.facts["total"]}',
                                         f'"total": "{item.expected.facts["total"]}"')
    assert not matcher.accepts(wrong_type.encode())  # a total written as text is not valid


def scripted(tokenizer, item, answer: str) -> ScriptedModel:
    """A small random model that writes ``answer`` as its tool call after the item's prompt."""
    prompt_length = len(render(tokenizer, item.prompt, tools=item.tools).ids)
    markers = marker_ids(tokenizer)
    script = [markers["tool_call"], *tokenizer.encode(answer), markers["end_tool_call"]]
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=32, n_layers=2,
                               n_heads=2)
    return ScriptedModel(config, script, prompt_length).eval()


@pytest.mark.parametrize("order", ORDERS)
def test_a_constrained_reply_is_scored_on_its_total(tokenizer, order):
    item = field_order_items(order, 1, "heldout", 0)[0]
    right = evaluate(scripted(tokenizer, item, call_text(item)), tokenizer, [item])
    assert right["accuracy"] == right["valid"] == right["running_right"] == right["steps_right"] == 1.0
    assert right["rows"][0]["stop_reason"] == "tool_use"
    total = item.expected.facts["total"]
    off_by_one = call_text(item).replace(f'"total": {total}', f'"total": {total + 1}')
    wrong = evaluate(scripted(tokenizer, item, off_by_one), tokenizer, [item])
    assert wrong["accuracy"] == 0.0 and wrong["valid"] == 1.0 and wrong["running_right"] == 1.0
    assert wrong["agrees_with_own_running"] == 0.0  # it wrote the right sums and then another total


# ------------------------------------------------------------------------------------------ the script
@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, tokenizer) -> Path:
    """A tiny random base model folder (the real experiment starts from data/models/base)."""
    folder = tmp_path_factory.mktemp("tiny_base")
    torch.manual_seed(0)
    save_weights(Transformer(ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=32,
                                               n_layers=2, n_heads=2)), folder)
    (folder / "tokenizer.json").write_bytes((REPO / "data" / "models" / "base" / "tokenizer.json").read_bytes())
    return folder


def test_a_quick_run_writes_results_with_both_fractions(tiny_base, tmp_path):
    out = tmp_path / "results.json"
    subprocess.run([sys.executable, str(BUILD), "--quick", "--base", str(tiny_base), "--steps", "2",
                    "--heldout", "3", "--threads", "1", "--out", str(out), "--runs", str(tmp_path / "runs")],
                   check=True, cwd=REPO, capture_output=True, text=True)
    results = json.loads(out.read_text())
    assert results["n"] == 3
    for order in ORDERS:
        assert 0.0 <= results[order] <= 1.0
        assert results[order] == results["details"][order]["accuracy"]
        assert (tmp_path / "runs" / "seed1337" / order / "model" / "model.safetensors").is_file()
    assert results["effect"] == pytest.approx(results["evidence_first"] - results["conclusion_first"], abs=1e-3)
    assert [run["seed"] for run in results["runs"]] == [1337]
    assert "--quick" in results["command"]
    # the seed's own results can be combined again without training
    again = tmp_path / "again.json"
    subprocess.run([sys.executable, str(BUILD), "--combine", str(tmp_path / "runs" / "seed1337" / "results.json"),
                    "--out", str(again)], check=True, cwd=REPO, capture_output=True, text=True)
    combined = json.loads(again.read_text())
    assert {k: combined[k] for k in ("n", *ORDERS, "runs")} == {k: results[k] for k in ("n", *ORDERS, "runs")}


def one_run(seed: int, evidence: float, conclusion: float, **settings) -> dict:
    details = {order: {**{key: score for key in DETAIL_FIGURES}, "replies": [f"{order} {seed}"]}
               for order, score in (("evidence_first", evidence), ("conclusion_first", conclusion))}
    return {"n": 200, "evidence_first": evidence, "conclusion_first": conclusion, "guess_most_common_total": 0.06,
            "settings": {"steps": 300, "numbers_per_question": [7, 10], **settings, "seed": seed},
            "wall_minutes": 12.0, "details": details}


def test_runs_of_several_seeds_combine_into_means_with_each_seed_kept():
    combined = combine_runs([one_run(1, 0.2, 0.34), one_run(2, 0.6, 0.26), one_run(3, 0.5, 0.3)])
    assert combined["evidence_first"] == pytest.approx(1.3 / 3, abs=1e-3)
    assert combined["conclusion_first"] == pytest.approx(0.3, abs=1e-3)
    assert combined["effect"] == pytest.approx((-0.14 + 0.34 + 0.2) / 3, abs=1e-3)
    assert [(run["seed"], run["effect"]) for run in combined["runs"]] == [(1, -0.14), (2, 0.34), (3, 0.2)]
    assert combined["settings"] == {"steps": 300, "numbers_per_question": [7, 10], "seeds": [1, 2, 3]}
    assert combined["details"]["evidence_first"]["running_right"] == pytest.approx(1.3 / 3, abs=1e-3)
    assert combined["details"]["evidence_first"]["replies"] == ["evidence_first 1"]
    assert combined["wall_minutes"] == 36.0


def test_runs_that_differ_in_more_than_their_seed_are_not_combined():
    with pytest.raises(ValueError, match="more than their seed"):
        combine_runs([one_run(1, 0.2, 0.3), one_run(2, 0.2, 0.3, steps=600)])
    with pytest.raises(ValueError, match="twice"):
        combine_runs([one_run(1, 0.2, 0.3), one_run(1, 0.4, 0.3)])
    with pytest.raises(ValueError, match="at least one"):
        combine_runs([])


def test_the_committed_results_are_consistent_with_their_replies():
    """data/experiments/field_order/results*.json: the keys the issue names, each seed's fractions of
    n, the headline figures their means, the effect their difference, and every stored reply scored
    the way score_reply scores it."""
    for name in ("results.json", "results_3_to_6_300_steps.json", "results_7_to_10_300_steps.json"):
        results = json.loads((REPO / "data" / "experiments" / "field_order" / name).read_text())
        assert results["n"] >= 100 and len(results["runs"]) >= 3
        for order in ORDERS:
            for run in results["runs"]:
                assert abs(run[order] * results["n"] - round(run[order] * results["n"])) < 1e-6
            assert results[order] == pytest.approx(sum(run[order] for run in results["runs"]) / len(results["runs"]),
                                                   abs=1e-3)
            for reply in results["details"][order]["replies"]:
                assert reply["true_total"] == sum(reply["numbers"])
                assert reply["correct"] == (reply["total"] == reply["true_total"])
                assert reply["running_right"] == (reply["running"] == running_sums(reply["numbers"]))
        assert results["effect"] == pytest.approx(results["evidence_first"] - results["conclusion_first"], abs=2e-3)
