"""Notebook 09's pieces, headless: the written/given token view, tool_steps, the approval agent (its
Approve / Deny buttons really decide whether the tool runs, clicked from here while the loop waits in its
thread), and the failure-rate table and plot built from the committed measurements."""
from __future__ import annotations

import json
import threading
import time

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from llmkit.chat.template import render  # noqa: E402
from llmkit.chat.client import Message  # noqa: E402
from llmkit.generation.generate import Usage  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.chat.tools import run_tool_call
from llmkit.course.tools import calculator, get_weather, web_search  # noqa: E402
from llmkit.chat.trace import Bill  # noqa: E402
from llmkit.viz import agents as viz  # noqa: E402
from plot_checks import static_html  # noqa: E402

QUESTION = [{"role": "user", "content": "Will it rain in Pune tomorrow?"}]
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Pune", "day": "tomorrow"}}


def reply(*content: dict) -> Message:
    stop_reason = "tool_use" if content[-1]["type"] == "tool_use" else "end_turn"
    return Message(id="msg_fake", content=list(content), stop_reason=stop_reason,
                   usage=Usage(input_tokens=10, output_tokens=5), bill=Bill(10, 0, 5))


class ScriptedClient:
    """Returns the scripted replies in order (the last one forever); records each request."""

    def __init__(self, *replies: Message):
        self.replies, self.requests = list(replies), []
        self.messages = self

    def create(self, *, messages, tools, **kwargs):
        self.requests.append(messages)
        return self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]


def answered() -> ScriptedClient:
    """A model that asks for the weather, then says "Done." whatever the result."""
    return ScriptedClient(reply(CALL), reply({"type": "text", "text": "Done."}))


class BrokenClient(ScriptedClient):
    def create(self, **request):
        raise ValueError("the prompt is too long")


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------- tokens
def test_tokens_from_keeps_what_one_step_added(tokenizer):
    result = run_tool_call([get_weather], "get_weather", CALL["input"], tool_use_id="toolu_1")
    conversation = QUESTION + [{"role": "assistant", "content": [CALL]}, {"role": "user", "content": [result]}]
    prompt = render(tokenizer, QUESTION, tools=[get_weather])
    full = render(tokenizer, conversation, tools=[get_weather])
    added = viz.tokens_from(full, len(prompt))
    assert prompt.ids + added.ids == full.ids and prompt.mask + added.mask == full.mask
    assert added.roles[0] == "assistant" and added.roles[-1] == "assistant" and "tool_result" in added.roles
    call_text = tokenizer.decode([t for t, written in zip(added.ids, added.mask) if written])
    assert call_text.startswith("<|tool_call|>") and call_text.endswith("<|end_tool_call|>")  # only the call
    assert "chance_of_rain_percent" in tokenizer.decode(added.ids)  # the result, given not written
    assert len(viz.tokens_from(full, len(full))) == 0
    with pytest.raises(ValueError, match="start"):
        viz.tokens_from(full, len(full) + 1)


# ---------------------------------------------------------------------------------------------- tool_steps
def test_tool_steps_pairs_calls_with_results_and_says_who_ran_them():
    weather = run_tool_call([get_weather], "get_weather", CALL["input"], tool_use_id="toolu_1")
    search = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "rain in Pune"}}
    found = {"type": "server_tool_result", "tool_use_id": "srv_1", "content": "{}", "is_error": False}
    transcript = QUESTION + [{"role": "assistant", "content": [search, found, CALL]},
                             {"role": "user", "content": [weather]},
                             {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]}]
    steps = viz.tool_steps(transcript)
    assert [(s["name"], s["ran_by"], s["result"]) for s in steps] == [
        ("web_search", "the provider", "{}"), ("get_weather", "your code", weather["content"])]
    assert steps[1]["input"] == CALL["input"] and steps[1]["is_error"] is False
    unanswered = viz.tool_steps(QUESTION + [{"role": "assistant", "content": [CALL]}])
    assert unanswered == [{"name": "get_weather", "input": CALL["input"], "result": None, "is_error": None,
                           "ran_by": "your code"}]


# ---------------------------------------------------------------------------------------------- approval
@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_the_buttons_decide_whether_the_tool_runs(decision):
    client = answered()
    agent = viz.approval_agent(client, QUESTION, [get_weather], max_tokens=32)
    agent.run_button.click()
    wait_until(lambda: agent.waiting)
    assert "get_weather" in agent.pending.value and "Pune" in agent.pending.value
    assert len(client.requests) == 1  # the loop is paused between the model's call and the tool
    (agent.approve_button if decision == "allow" else agent.deny_button).click()
    assert agent.wait(10) and agent.error is None
    assert agent.decisions == [("get_weather", CALL["input"], decision)]
    [sent] = agent.result.transcript[2]["content"]
    if decision == "allow":
        assert not sent["is_error"] and json.loads(sent["content"]) == get_weather(city="Pune", day="tomorrow")
    else:
        assert sent["is_error"] and sent["content"] == "denied by the user: get_weather was not run"
    assert agent.result.final.text == "Done." and not agent.waiting and not agent.run_button.disabled
    assert f"<b>{decision}</b>" in agent.report.value and "Done." in agent.report.value


def test_the_hook_refuses_to_wait_on_the_main_thread():
    agent = viz.approval_agent(answered(), QUESTION, [get_weather], max_tokens=32)
    assert threading.current_thread() is threading.main_thread()
    with pytest.raises(RuntimeError, match="Run button"):
        agent.approve("get_weather", CALL["input"])


def test_a_failed_run_is_shown_not_lost():
    agent = viz.approval_agent(BrokenClient(), QUESTION, [get_weather], max_tokens=32)
    agent.run()
    assert agent.wait(10)
    assert isinstance(agent.error, ValueError) and "too long" in agent.status.value
    assert not agent.run_button.disabled and agent.result is None


def test_the_widget_renders_without_a_kernel():
    agent = viz.approval_agent(answered(), QUESTION, [get_weather, calculator], max_tokens=32)
    static = static_html(agent)  # what a viewer without widgets shows, beside the live view
    assert "Will it rain in Pune tomorrow?" in static and "<code>calculator</code>" in static
    assert "not run yet" in static and "Run the agent" in static


def test_approval_agent_bad_input():
    with pytest.raises(TypeError, match="Tool objects"):
        viz.approval_agent(answered(), QUESTION, [get_weather.definition()], max_tokens=32)
    with pytest.raises(ValueError, match="non-empty"):
        viz.approval_agent(answered(), [], [get_weather], max_tokens=32)
    with pytest.raises(TypeError, match="max_tokens"):
        viz.approval_agent(answered(), QUESTION, [get_weather])
    agent = viz.approval_agent(answered(), QUESTION, [get_weather, web_search], max_tokens=32)
    with pytest.raises(ValueError, match="allow"):
        agent.click("maybe")


# ---------------------------------------------------------------------------------------------- failure rates
REACT = {"runs": [{"temperature": 1.0, "n": 10, "parse_failure_rate": 0.5,
                   "by_reason": {"no_action": 0.2, "bad_argument_syntax": 0.3}}]}
VALIDITY = {"rows": [{"constrained": False, "temperature": 1.0, "n": 10, "calls": 9, "invalid_rate": 0.3},
                     {"constrained": True, "temperature": 1.0, "n": 10, "calls": 9, "invalid_rate": 0.0},
                     {"constrained": True, "temperature": 0.7, "n": 10, "calls": 10, "invalid_rate": 0.1}]}


def test_invalid_call_rows_split_no_call_from_a_call_that_cannot_run():
    rows = viz.invalid_call_rows(REACT, VALIDITY)
    assert [(r["temperature"], r["protocol"]) for r in rows] == [
        (0.7, "structured + constrained"), (1.0, "ReAct text"), (1.0, "structured"), (1.0, "structured + constrained")]
    react, structured = rows[1], rows[2]
    assert react["unrunnable"] == pytest.approx(0.3) and react["no_call"] == pytest.approx(0.2)
    assert structured["unrunnable"] == 0.3 and structured["no_call"] == pytest.approx(0.1)
    table = viz.format_invalid_calls(rows)
    assert "ReAct text" in table and "50.0%" in table and "40.0%" in table
    with pytest.raises(ValueError, match="'runs'"):
        viz.invalid_call_rows({"rows": []}, VALIDITY)


def test_invalid_call_rows_from_the_committed_measurements():
    react = json.loads(data_path("models", "chat", "react_parse_failures.json").read_text())
    validity = json.loads(data_path("models", "chat", "tool_call_validity.json").read_text())
    rows = viz.invalid_call_rows(react, validity)
    assert {r["protocol"] for r in rows} == set(viz.PROTOCOLS)
    assert all(0 <= r["unrunnable"] and 0 <= r["no_call"] and r["unrunnable"] + r["no_call"] <= 1 + 1e-9 for r in rows)
    assert len(rows) == len(react["runs"]) + len(validity["rows"])


def test_plot_invalid_calls_draws_two_segments_per_bar():
    rows = viz.invalid_call_rows(REACT, VALIDITY)
    fig = viz.plot_invalid_calls(rows)
    ax = fig.axes[0]
    heights = [patch.get_height() for patch in ax.patches]
    assert len(heights) == 2 * len(rows)
    assert heights[2:4] == [pytest.approx(0.3), pytest.approx(0.2)]  # the ReAct bar: cannot run, then no call
    assert ax.get_title() and ax.get_ylabel() == "fraction of replies" and ax.get_xlabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.7", "1"]
    with pytest.raises(ValueError, match="empty"):
        viz.plot_invalid_calls([])


FIELD_ORDER = {"n": 20, "evidence_first": 0.9, "conclusion_first": 0.35, "effect": 0.55, "guess_most_common_total": 0.1,
               "settings": {"numbers_per_question": [7, 10], "steps": 600, "seeds": [1, 2]},
               "runs": [{"seed": 1, "evidence_first": 0.95, "conclusion_first": 0.3, "effect": 0.65},
                        {"seed": 2, "evidence_first": 0.85, "conclusion_first": 0.4, "effect": 0.45}],
               "details": {order: {"running_right": right, "agrees_with_own_running": agrees, "mean_output_tokens": 41.0}
                           for order, right, agrees in (("evidence_first", 0.85, 0.95),
                                                        ("conclusion_first", 0.8, 0.4))}}


def test_field_order_lines_state_the_figures(tmp_path):
    lines = viz.field_order_lines(FIELD_ORDER)
    assert lines[0].startswith("7-10 numbers per sum, 600 fine-tuning steps, 20 held-out sums, 2 fine-tuning seed(s)")
    assert "total right 90%" in lines[1] and "running sums all right 85%" in lines[1]
    assert "total right 35%" in lines[2] and "its own last sum 40%" in lines[2]
    assert "seed    1: running sums first 95%, total first 30%, difference +65%" in lines[3]
    assert "difference +45%" in lines[4]
    assert lines[5].strip().startswith("evidence first minus conclusion first: +55%") and "10%" in lines[5]
    partial = tmp_path / "results.json"
    partial.write_text(json.dumps({"n": 3}))
    with pytest.raises(ValueError, match="build.py"):
        viz.read_field_order(partial)


def test_plot_field_order_draws_one_bar_per_order_and_a_dot_per_seed():
    fig = viz.plot_field_order(FIELD_ORDER)
    ax = fig.axes[0]
    assert [round(p.get_height(), 2) for p in ax.patches] == [0.9, 0.35]
    dots = [collection.get_offsets()[:, 1].tolist() for collection in ax.collections]
    assert dots == [[0.95, 0.85], [0.3, 0.4]]
    assert ax.get_title() and ax.get_xlabel() and "of 20" in ax.get_ylabel()
