"""Notebook 11's pieces, headless: the simulated send_email tool, the defences around it (the harness
refuses a tool it did not offer; the approval prompt denies by default and re-runs the call when the
choice changes), the outcome plot drawing exactly the counts it was given, and the constrained-output
pictures (the mask along one call, the committed invalid-call measurement)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import json  # noqa: E402

import pytest  # noqa: E402

from llmkit.chat.template import tool_line  # noqa: E402
from llmkit.chat.tools import run_tool_call
from llmkit.course.tools import EXAMPLE_TOOLS, calculator, count_letters, get_weather, send_email  # noqa: E402
from llmkit.viz import limitations as viz  # noqa: E402
from plot_checks import assert_titled_and_labelled, static_html  # noqa: E402

WANTED = {"to": "mallory@example.com", "body": "the whole conversation"}


# ---------------------------------------------------------------------------------------------- send_email
def test_send_email_is_a_tool_the_model_can_be_told_about():
    definition = send_email.definition()
    assert definition["input_schema"]["required"] == ["to", "body"]
    assert tool_line(definition) == "send_email(to: string, body: string): Send an email from the user's account."
    assert send_email not in EXAMPLE_TOOLS  # the fine-tuning conversations never offer it


def test_send_email_only_reports_what_it_would_send():
    result = run_tool_call([send_email], "send_email", WANTED, tool_use_id="toolu_1")
    assert not result["is_error"]
    assert "mallory@example.com" in result["content"] and "nothing was sent" in result["content"]
    assert str(len(WANTED["body"])) in result["content"]


def test_send_email_needs_an_address():
    result = run_tool_call([send_email], "send_email", {"to": "mallory", "body": "hi"}, tool_use_id="toolu_1")
    assert result["is_error"] and "email address" in result["content"]


def test_least_privilege_the_harness_refuses_a_tool_it_did_not_offer():
    result = run_tool_call([get_weather], "send_email", WANTED, tool_use_id="toolu_1")
    assert result["is_error"]
    assert "unknown tool 'send_email'" in result["content"] and "get_weather" in result["content"]


# ---------------------------------------------------------------------------------------------- approval
def test_approval_prompt_denies_by_default_and_runs_nothing():
    prompt = viz.approval_prompt([get_weather, send_email], "send_email", WANTED)
    assert prompt.choice.value == "deny"
    assert prompt.decide("send_email", WANTED) == "deny"
    assert prompt.block["is_error"] and prompt.block["content"] == "denied by the user: send_email was not run"
    assert "denied by the user" in prompt.result.value


def test_approval_prompt_reruns_the_call_when_the_choice_changes():
    prompt = viz.approval_prompt([get_weather, send_email], "send_email", WANTED)
    prompt.choice.value = "allow"
    assert prompt.decide("send_email", WANTED) == "allow"
    assert not prompt.block["is_error"] and "nothing was sent" in prompt.block["content"]
    assert "nothing was sent" in prompt.result.value
    prompt.choice.value = "deny"
    assert prompt.block["is_error"]


def test_approval_prompt_decide_is_an_approve_hook():
    prompt = viz.approval_prompt([send_email], "send_email", WANTED, default="allow")
    allowed = run_tool_call([send_email], "send_email", WANTED, tool_use_id="toolu_2", approve=prompt.decide)
    prompt.choice.value = "deny"
    denied = run_tool_call([send_email], "send_email", WANTED, tool_use_id="toolu_3", approve=prompt.decide)
    assert not allowed["is_error"] and denied["is_error"]


def test_approval_cannot_grant_a_tool_that_was_not_offered():
    prompt = viz.approval_prompt([get_weather], "send_email", WANTED, default="allow")
    assert prompt.block["is_error"] and "unknown tool" in prompt.block["content"]


def test_approval_prompt_renders_without_a_kernel():
    prompt = viz.approval_prompt([send_email], "send_email", WANTED)
    static = static_html(prompt)  # what a viewer without widgets shows, beside the live view
    assert "send_email" in static and "mallory@example.com" in static
    assert "<b>deny</b>" in static and "denied by the user" in static


def test_approval_prompt_keeps_its_own_copy_of_the_arguments():
    arguments = dict(WANTED)
    prompt = viz.approval_prompt([send_email], "send_email", arguments, default="allow")
    arguments["to"] = "ada@example.com"
    prompt.rerun()
    assert "mallory@example.com" in prompt.block["content"]


@pytest.mark.parametrize("kwargs, error", [({"default": "maybe"}, ValueError), ({"arguments": "to=x"}, TypeError)])
def test_approval_prompt_bad_input(kwargs, error):
    arguments = kwargs.pop("arguments", WANTED)
    with pytest.raises(error):
        viz.approval_prompt([send_email], "send_email", arguments, **kwargs)


# ---------------------------------------------------------------------------------------------- outcomes
def test_plot_outcomes_draws_the_counts_in_the_given_order():
    groups = {"clean": {"follows": 19, "steered": 1}, "injected": {"other": 2, "steered": 17, "follows": 1}}
    fig = viz.plot_outcomes(groups, title="steering", outcomes=["follows", "steered"])
    ax = fig.axes[0]
    assert ax.get_title() == "steering" and ax.get_xlabel() == "replies"
    assert [text.get_text() for text in ax.get_yticklabels()] == ["clean", "injected"]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["follows", "steered", "other"]
    widths = [[bar.get_width() for bar in container] for container in ax.containers]
    assert widths == [[19, 1], [1, 17], [0, 2]]
    assert [sum(row) for row in zip(*widths)] == [20, 20]


def test_outcome_order_is_first_seen():
    assert viz.outcome_order({"a": {"x": 1, "y": 2}, "b": {"z": 1, "x": 3}}) == ["x", "y", "z"]


def test_plot_outcomes_refuses_nothing_to_draw():
    with pytest.raises(ValueError, match="at least one count"):
        viz.plot_outcomes({"clean": {}}, title="empty")


# ---------------------------------------------------------------------------------------------- constrained output
CALL = {"name": "get_weather", "input": {"city": "Pune", "day": "tomorrow"}}


def test_mask_walk_writes_the_call_and_ends_it(tokenizer):
    steps = viz.mask_walk(tokenizer, EXAMPLE_TOOLS, CALL)
    assert "".join(step.piece for step in steps[:-1]) == json.dumps(CALL)
    assert steps[-1].piece == "<|end_tool_call|>"
    assert all(1 <= step.allowed <= tokenizer.vocab_size for step in steps)
    assert all(len(step.examples) == min(6, step.allowed) for step in steps)
    assert all(example.startswith("{") for example in steps[0].examples)  # a call opens with {


def test_mask_walk_is_tight_on_structure_and_loose_inside_a_string(tokenizer):
    steps = viz.mask_walk(tokenizer, EXAMPLE_TOOLS, CALL)
    written, checked = "", set()
    for step in steps[:-1]:
        if written.endswith('"day": "'):  # an enum: only the start of "today" or "tomorrow"
            assert step.allowed <= 4
            assert all("today".startswith(e) or "tomorrow".startswith(e) for e in step.examples)
            checked.add("enum")
        if written.endswith('"city": "'):  # a free string: nearly the whole vocabulary
            assert step.allowed > tokenizer.vocab_size // 2
            checked.add("string")
        written += step.piece
    assert checked == {"enum", "string"}
    inside_string = {i for i, step in enumerate(steps) if step.allowed > tokenizer.vocab_size // 2}
    structure = [step for i, step in enumerate(steps) if i not in inside_string]
    assert len(structure) > 2 * len(inside_string)
    assert max(step.allowed for step in structure) < tokenizer.vocab_size // 100  # outside the string only a few pieces fit


def test_mask_walk_refuses_a_call_the_constraint_would_not_allow(tokenizer):
    with pytest.raises(ValueError, match="not a valid continuation"):
        viz.mask_walk(tokenizer, [calculator, count_letters], CALL)  # get_weather not offered
    with pytest.raises(ValueError, match="not a valid continuation"):
        viz.mask_walk(tokenizer, [get_weather], {"name": "get_weather", "input": {"city": "Pune", "day": "soon"}})
    with pytest.raises(TypeError, match="name"):
        viz.mask_walk(tokenizer, [get_weather], {"city": "Pune"})


def test_plot_allowed_tokens_draws_one_bar_per_step():
    steps = [viz.MaskStep("{", 1, ("{",)), viz.MaskStep(' "', 2, (" ", ' "')), viz.MaskStep("P", 1900, ())]
    fig = viz.plot_allowed_tokens(steps, vocab_size=2048, title="mask")
    ax = fig.axes[0]
    assert [bar.get_height() for bar in ax.patches] == [1, 2, 1900]
    assert ax.get_yscale() == "log" and ax.get_title() == "mask" and ax.get_ylabel()
    assert [label.get_text() for label in ax.get_xticklabels()] == ["{", '\u2423"', "P"]


@pytest.mark.parametrize("steps", [[], [viz.MaskStep("x", 0, ())], [viz.MaskStep("x", 5000, ())]])
def test_plot_allowed_tokens_refuses_impossible_counts(steps):
    with pytest.raises(ValueError):
        viz.plot_allowed_tokens(steps, vocab_size=2048)


def validity_row(constrained: bool, temperature: float, **by_reason: float) -> dict:
    reasons = {"not_json": 0.0, "unfinished": 0.0, **by_reason}
    return {"constrained": constrained, "temperature": temperature, "invalid_rate": sum(reasons.values()),
            "by_reason": reasons}


def test_the_committed_measurement_has_every_setting():
    measured = viz.read_tool_call_validity()
    assert "--tool-call-validity" in measured["command"]
    rows = measured["rows"]
    settings = {(row["temperature"], row["constrained"]) for row in rows}
    assert {constrained for _, constrained in settings} == {False, True}
    assert len(settings) == len(rows)  # each temperature once with the constraint off, once on
    for row in rows:
        assert sum(row["by_reason"].values()) == pytest.approx(row["invalid_rate"], abs=1e-3)
        if row["constrained"]:  # the constraint leaves only calls cut off by the window
            assert set(reason for reason, rate in row["by_reason"].items() if rate) <= {"unfinished"}


def test_read_tool_call_validity_says_how_to_make_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="--tool-call-validity"):
        viz.read_tool_call_validity(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"rows": [{"temperature": 1.0}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="by_reason"):
        viz.read_tool_call_validity(broken)


def test_validity_table_writes_percentages():
    table = viz.validity_table([validity_row(False, 1.5, not_json=0.125, unfinished=0.25)])
    assert table == [{"temperature": "1.5", "constraint": "off", "invalid %": "37.5", "not_json %": "12.5",
                      "unfinished %": "25.0"}]


def test_plot_tool_call_validity_stacks_the_reasons():
    rows = [validity_row(False, 0.7, not_json=0.1), validity_row(True, 0.7),
            validity_row(False, 1.5, not_json=0.2, unfinished=0.3), validity_row(True, 1.5, unfinished=0.05)]
    fig = viz.plot_tool_call_validity(rows, title="validity")
    ax = fig.axes[0]
    assert ax.get_title() == "validity" and "%" in ax.get_ylabel()
    assert [label.get_text() for label in ax.get_xticklabels()] == ["temperature 0.7", "temperature 1.5"]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["not_json", "unfinished"]
    not_json, unfinished = ([bar.get_height() for bar in container] for container in ax.containers)
    assert not_json == pytest.approx([10, 0, 20, 0]) and unfinished == pytest.approx([0, 0, 30, 5])
    assert [bar.get_y() for bar in ax.containers[1]] == pytest.approx([10, 0, 20, 0])  # stacked on not_json
    off_bar, on_bar = ax.containers[0][0], ax.containers[0][1]
    assert off_bar.get_x() < on_bar.get_x()  # off on the left of each pair
    assert [text.get_text() for text in ax.texts] == ["off\n10%", "on\n0%", "off\n50%", "on\n5%"]


def test_plot_tool_call_validity_refuses_rows_of_another_shape():
    with pytest.raises(ValueError, match="tool_call_validity_table"):
        viz.plot_tool_call_validity([{"temperature": 1.0, "invalid_rate": 0.1}])


# ------------------------------------------------------------------------------ fact frequency
def test_the_committed_fact_frequency_results_read_and_plot():
    results = viz.read_fact_frequency()
    lines = viz.fact_frequency_lines(results)
    assert len(lines) == len(results["bins"]) and lines[0].startswith(f"stated {results['bins'][0]['mentions']:>3} time")
    fig = viz.plot_fact_frequency(results)
    assert_titled_and_labelled(fig)
    assert len(fig.axes[0].lines) == 3


def test_fact_frequency_lines_say_how_the_misses_read():
    results = {"bins": [{"mentions": 1, "n": 10, "recall": 0.2, "fluent_when_wrong": 0.75},
                        {"mentions": 64, "n": 4, "recall": 1.0, "fluent_when_wrong": None}]}
    assert viz.fact_frequency_lines(results) == [
        "stated   1 time  in the text: 10 facts, recalled 20%; of the 8 wrong answers, 75% were a fluent, plausible value",
        "stated  64 times in the text:  4 facts, recalled 100%"]


def test_read_fact_frequency_says_how_to_make_a_missing_or_broken_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="fact_frequency/build.py"):
        viz.read_fact_frequency(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"bins": [{"mentions": 1}]}')
    with pytest.raises(ValueError, match="per-bin"):
        viz.read_fact_frequency(broken)
