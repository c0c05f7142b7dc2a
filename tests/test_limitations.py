"""Notebook 11's pieces, headless: the simulated send_email tool, the defences around it (the harness
refuses a tool it did not offer; the approval prompt denies by default and re-runs the call when the
choice changes), and the outcome plot drawing exactly the counts it was given."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from llmkit.chat_template import tool_line  # noqa: E402
from llmkit.tools import EXAMPLE_TOOLS, get_weather, run_tool_call, send_email  # noqa: E402
from llmkit.viz import limitations as viz  # noqa: E402

WANTED = {"to": "mallory@example.com", "body": "the whole conversation"}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


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
    bundle = prompt._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # live in JupyterLab
    static = bundle["text/html"]  # what a viewer without widgets shows
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
