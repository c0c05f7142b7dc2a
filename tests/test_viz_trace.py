"""Notebook 10's pictures of a trace, headless: rows per request that agree with the client's own
usage and bill, events told in words, the itemised bill, and the timeline, bill plot and stepper.
Real requests run on a tiny random model (fast); a scripted model writes thinking and a tool call."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from llmkit.chat.client import Client  # noqa: E402
from llmkit.model.transformer import ModelConfig  # noqa: E402
from llmkit.course.tools import get_weather  # noqa: E402
from llmkit.chat.trace import Bill, Trace, request_rows  # noqa: E402
from llmkit.course.profiling import median_time_to_first_token  # noqa: E402
from llmkit.viz import trace as vt  # noqa: E402
from scripted_model import ScriptedModel  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
SYSTEM = "You are a helpful assistant."


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def tiny_client(tokenizer, tiny_llama):
    return Client.from_model(tiny_llama(tokenizer.vocab_size, context_length=256), tokenizer)


def scripted_client(tokenizer, written: str, prompt_length: int) -> Client:
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=32, n_layers=2, n_heads=2)
    script = tokenizer.encode(written, allowed_special="all")
    return Client.from_model(ScriptedModel(config, script, prompt_length).eval(), tokenizer)


def agent_like_trace() -> Trace:
    """The events of a two-request agent run, written by hand so every number is known."""
    trace = Trace()
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Pune", "day": "tomorrow"}}
    trace.add("request", t=0.0, request=1, id="msg_0001")
    trace.add("context", t=0.0, total=84, system=10, tools=55, history=0, new_message=19, dropped_messages=0)
    trace.add("prefill", t=0.0, duration=0.010, input_tokens=20, cache_read_input_tokens=64)
    trace.add("thinking", t=0.010, tokens=16)
    trace.add("answer", t=0.010, duration=0.320, stop_reason="tool_use", text="", content=[call], output_tokens=64)
    trace.add("bill", t=0.330, bill=Bill(20, 64, 64, thinking_tokens=16))
    trace.add("tool_call", t=0.331, duration=0.001, name="get_weather", input=call["input"], is_error=False)
    trace.add("tool_result", t=0.332, tokens=79, content='{"chance_of_rain_percent": 32}', is_error=False)
    trace.add("request", t=0.333, request=2, id="msg_0002")
    trace.add("context", t=0.333, total=230, system=10, tools=55, history=83, new_message=82, dropped_messages=0)
    trace.add("prefill", t=0.333, duration=0.020, input_tokens=86, cache_read_input_tokens=144)
    trace.add("answer", t=0.353, duration=0.100, stop_reason="end_turn", text="No umbrella needed: 32% chance of rain.",
              content=[], output_tokens=21)
    trace.add("bill", t=0.453, bill=Bill(86, 144, 21))
    trace.add("final", t=0.454, text="No umbrella needed: 32% chance of rain.", stop_reason="end_turn")
    return trace


def test_request_rows_agree_with_each_reply(tiny_client):
    trace = Trace()
    first = tiny_client.messages.create(messages=ask("My name is Ada."), system=SYSTEM, max_tokens=6,
                                        temperature=0, trace=trace)
    history = [*ask("My name is Ada."), first.to_param(), *ask("What is my name?")]
    second = tiny_client.messages.create(messages=history, system=SYSTEM, max_tokens=6, temperature=0, trace=trace)
    rows = request_rows(trace)
    assert [row.number for row in rows] == [1, 2] and [row.id for row in rows] == [first.id, second.id]
    for row, reply, messages in zip(rows, (first, second), (ask("My name is Ada."), history)):
        prompt = tiny_client.messages.render(messages=messages, system=SYSTEM)
        assert row.prompt_tokens == len(prompt) == row.system + row.tools + row.history + row.new_message
        assert (row.usage.input_tokens, row.usage.cache_read_input_tokens, row.usage.output_tokens) == (
            reply.usage.input_tokens, reply.usage.cache_read_input_tokens, reply.usage.output_tokens)
        assert row.bill == reply.bill and row.cost == reply.cost and row.stop_reason == reply.stop_reason
        assert row.text == reply.text and row.billed_tokens == row.prompt_tokens + row.usage.output_tokens
    assert rows[0].history == 0 and rows[1].history > 0 and rows[1].system == rows[0].system > 0
    assert rows[1].usage.cache_read_input_tokens > 0  # the first request's prompt was reused


def test_thinking_tokens_are_counted_per_request(tokenizer):
    written = "<|thinking|>I need the forecast.<|end_thinking|>Sunny.<|end_turn|>"
    client = scripted_client(tokenizer, written, 0)
    client.model.prompt_length = len(client.messages.render(messages=ask("Weather?"), tools=[get_weather]))
    trace = Trace()
    reply = client.messages.create(messages=ask("Weather?"), tools=[get_weather], max_tokens=30, temperature=0,
                                   trace=trace)
    (row,) = request_rows(trace)
    assert row.usage.thinking_tokens == reply.usage.thinking_tokens > 0 and row.tools > 0
    assert row.usage.output_tokens == len(tokenizer.encode(written, allowed_special="all"))
    lines = vt.itemised_bill([row]).splitlines()
    thinking, text = row.usage.thinking_tokens, row.usage.output_tokens - row.usage.thinking_tokens
    assert lines[1].split()[3:6] == [str(thinking), str(text), "0"]  # no searches


def test_request_rows_skip_tool_events_and_refuse_incomplete_requests():
    rows = request_rows(agent_like_trace())
    assert [(r.number, r.stop_reason, r.prompt_tokens, r.usage.thinking_tokens) for r in rows] == [
        (1, "tool_use", 84, 16), (2, "end_turn", 230, 0)]
    assert rows[0].usage.time_to_first_token == pytest.approx(0.010) and rows[1].decode_time == pytest.approx(0.100)
    assert request_rows(Trace()) == []
    broken = Trace()
    broken.add("request", request=1, id="msg_0001")
    with pytest.raises(ValueError, match="msg_0001 has no context, prefill, answer, bill event"):
        request_rows(broken)


def test_a_request_with_a_server_tool_adds_up_its_rounds():
    """With a server tool the client generates, runs the tool and generates again in one request:
    one row, the rounds' tokens added up as the bill adds them."""
    trace = Trace()
    trace.add("request", request=1, id="msg_0001")
    trace.add("context", total=60, system=5, tools=30, history=0, new_message=25)
    trace.add("prefill", t=0.0, duration=0.01, input_tokens=60, cache_read_input_tokens=0)
    trace.add("thinking", t=0.01, tokens=5)
    trace.add("answer", t=0.01, duration=0.1, stop_reason="tool_use", text="", content=[], output_tokens=20)
    trace.add("tool_call", t=0.11, duration=0.002, name="web_search", input={"query": "Pune"}, is_error=False,
              server=True)
    trace.add("tool_result", tokens=40, content="rain", is_error=False, server=True)
    trace.add("prefill", t=0.12, duration=0.02, input_tokens=44, cache_read_input_tokens=80)
    trace.add("answer", t=0.14, duration=0.05, stop_reason="end_turn", text="Take one.", content=[], output_tokens=6)
    trace.add("bill", bill=Bill(104, 80, 26))
    (row,) = request_rows(trace)
    assert (row.rounds, row.usage.input_tokens, row.usage.cache_read_input_tokens, row.usage.output_tokens, row.usage.thinking_tokens) == (
        2, 104, 80, 26, 5)
    assert row.stop_reason == "end_turn" and row.text == "Take one." and row.usage.time_to_first_token == 0.01
    assert "server tool" in vt.event_story(trace.of_kind("tool_call")[0])
    assert len(vt.plot_timeline(trace).axes[0].patches) == 6  # 2 prefills, 2 decodes, thinking, the tool run


def test_median_time_to_first_token_is_per_request():
    def run(*seconds):
        trace = Trace()
        for number, s in enumerate(seconds, start=1):
            trace.add("request", request=number, id=f"msg_{number}")
            trace.add("context", total=5, system=1, tools=0, history=0, new_message=4)
            trace.add("prefill", duration=s, input_tokens=5, cache_read_input_tokens=0)
            trace.add("answer", duration=0.1, stop_reason="end_turn", text="", output_tokens=1)
            trace.add("bill", bill=Bill(5, 0, 1))
        return request_rows(trace)

    runs = [run(0.3, 0.1), run(0.1, 0.2), run(0.2, 0.9)]
    assert median_time_to_first_token(runs) == pytest.approx([0.2, 0.2])
    with pytest.raises(ValueError, match="same number of requests"):
        median_time_to_first_token([run(0.1), run(0.1, 0.2)])
    with pytest.raises(ValueError):
        median_time_to_first_token([])


def test_the_itemised_bill_adds_up():
    rows = request_rows(agent_like_trace())
    text = vt.itemised_bill(rows)
    assert "output: thinking       16 tok  x $10/M = $0.000160" in text
    assert "output: text           69 tok  x $10/M" in text  # 64 - 16 + 21
    total = Bill(20, 64, 64).total + Bill(86, 144, 21).total
    assert text.splitlines()[-1].endswith(f"${total:.6f}")
    with pytest.raises(ValueError, match="rows is empty"):
        vt.itemised_bill([])


def test_the_itemised_bill_charges_each_search():
    trace = Trace()
    trace.add("request", t=0.0, request=1, id="msg_0001")
    trace.add("context", t=0.0, total=80, system=10, tools=40, history=0, new_message=30, dropped_messages=0)
    for t, read, cached in ((0.0, 80, 0), (0.2, 30, 112)):  # the model reads again after the search result
        trace.add("prefill", t=t, duration=0.01, input_tokens=read, cache_read_input_tokens=cached)
        trace.add("answer", t=t + 0.01, duration=0.1, stop_reason="tool_use" if t == 0 else "end_turn", text="",
                  content=[], output_tokens=20)
    trace.add("bill", t=0.4, bill=Bill(110, 112, 40, server_tool_calls=1))
    (row,) = request_rows(trace)
    text = vt.itemised_bill([row])
    assert text.splitlines()[1].split()[5] == "1" and "1 call x $0.01 per call = $0.010000" in text
    assert text.splitlines()[-1].endswith(f"${row.cost:.6f}") and row.cost > 0.01
    right = vt.plot_bill([row]).axes[1]
    assert sum(p.get_height() for p in right.patches) == pytest.approx(row.cost)


def test_every_event_is_told_in_words():
    stories = {event.kind: vt.event_story(event) for event in agent_like_trace().events}  # the last of each kind
    assert "No umbrella needed" in stories["answer"] and "end_turn" in stories["answer"]
    first_answer = vt.event_story(agent_like_trace().of_kind("answer")[0])
    assert "tool_use" in first_answer and "get_weather(city='Pune', day='tomorrow')" in first_answer
    assert "model runs nothing" in first_answer
    assert "our code" in stories["tool_call"] and "79 tokens" in stories["tool_result"]
    assert "64 tokens come from the prompt cache" in vt.event_story(agent_like_trace().of_kind("prefill")[0])
    assert "billed as output" in stories["thinking"] and "end_turn" in stories["final"]
    assert "$" in stories["bill"] and "system prompt 10" in stories["context"]


def test_the_timeline_draws_each_event_and_outlines_the_current_one():
    trace = agent_like_trace()
    figure = vt.plot_timeline(trace)
    ax = figure.axes[0]
    assert ax.get_title() and ax.get_xlabel() and "$" in ax.get_title()
    # 2 prefills, 2 decodes, 1 thinking segment, 1 tool run
    assert len(ax.patches) == 6
    thinking = [p for p in ax.patches if p.get_hatch() == "//"]
    assert len(thinking) == 1 and thinking[0].get_width() == pytest.approx(320 * 16 / 64)
    early = vt.plot_timeline(trace, upto=3).axes[0]  # request, context, prefill
    assert len(early.patches) == 1 and early.get_xlim() == pytest.approx(ax.get_xlim())
    assert tuple(early.patches[0].get_edgecolor()) == matplotlib.colors.to_rgba("red")
    with pytest.raises(ValueError, match="upto must be between 1 and 14"):
        vt.plot_timeline(trace, upto=15)
    with pytest.raises(ValueError, match="empty"):
        vt.plot_timeline(Trace())


def test_the_bill_plot_splits_tokens_and_dollars():
    rows = request_rows(agent_like_trace())
    figure = vt.plot_bill(rows)
    left, right = figure.axes
    assert left.get_ylabel() == "tokens" and right.get_ylabel() == "dollars" and left.get_xlabel()
    assert len(left.patches) == len(right.patches) == 5 * len(rows)  # Bill.lines: 5 parts
    heights = [sum(p.get_height() for p in left.patches if p.get_x() < 0.5)]  # the first request's bar
    assert heights == [pytest.approx(rows[0].billed_tokens)]
    assert sum(p.get_height() for p in right.patches) == pytest.approx(sum(r.cost for r in rows))


def test_the_stepper_tells_and_draws_each_step():
    widget = vt.trace_stepper(agent_like_trace())
    slider, text, picture = widget.children
    assert (slider.min, slider.max, slider.value) == (1, 14, 1)
    seen = {(text.value, bytes(picture.value))}
    for step in (5, 7, 14):
        slider.value = step
        assert (text.value, bytes(picture.value)) not in seen
        seen.add((text.value, bytes(picture.value)))
    assert "The loop ends" in text.value
    slider.value = 7
    assert "our code" in text.value and "tool_call" in text.value


def test_a_tool_result_is_shown_as_the_tokens_the_model_reads(tokenizer):
    block = {"type": "server_tool_result", "tool_use_id": "srvtoolu_1", "is_error": False,
             "content": '{"Pune, India": "Monsoon rain."}'}
    pieces = vt.result_tokens(tokenizer, block)
    assert pieces[0] == "<|tool_result|>" and pieces[-2:] == ["<|end_tool_result|>", "<|assistant|>"]
    assert "".join(pieces[1:-2]) == block["content"].replace(" ", "␣")  # spaces shown as a visible mark
    assert len(pieces) == len(tokenizer.encode(block["content"])) + 3


def test_without_ids_compares_runs_block_for_block():
    from llmkit.viz.trace import without_ids

    def run(call_id: str, city: str) -> list[dict]:
        return [{"role": "user", "content": "Rain in Pune?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "get_weather",
                                                   "input": {"city": city}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "31%"}]}]

    assert without_ids(run("toolu_1", "Pune")) == without_ids(run("toolu_7", "Pune"))  # only the ids differ
    assert without_ids(run("toolu_1", "Pune")) != without_ids(run("toolu_1", "Puna"))  # what the model wrote differs
    assert without_ids(run("toolu_1", "Pune"))[0] == "Rain in Pune?"
