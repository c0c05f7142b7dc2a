"""llmkit.chat.trace: the bill's arithmetic and the events a request records."""
from __future__ import annotations

import pytest
import torch

from llmkit.chat.client import Client
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.course.tools import EXAMPLE_TOOLS
from llmkit.chat.trace import Bill, Prices, Trace

SYSTEM = "You are a helpful assistant. Answer briefly, and use a tool when one helps."


def test_bill_lines_and_total():
    bill = Bill(input_tokens=1_000, cache_read_input_tokens=4_000, output_tokens=300, thinking_tokens=100,
                server_tool_calls=2)
    assert [(line.label, line.count) for line in bill.lines] == [
        ("cache read", 4000), ("input", 1000), ("output: thinking", 100), ("output: text", 200),
        ("server tool calls", 2)]
    assert [line.dollars for line in bill.lines] == pytest.approx([0.0008, 0.002, 0.001, 0.002, 0.02])
    assert bill.total == pytest.approx(0.0258)
    assert "total" in str(bill) and "$0.025800" in str(bill) and "2 call" in str(bill)


def test_thinking_is_part_of_the_output():
    assert Bill(output_tokens=30, thinking_tokens=30).total == Bill(output_tokens=30).total
    with pytest.raises(ValueError, match="part of output_tokens"):
        Bill(output_tokens=10, thinking_tokens=11)


def test_bills_add_up_only_under_one_price_table():
    a, b = Bill(10, 20, 30, thinking_tokens=5, server_tool_calls=1), Bill(1, 2, 3, server_tool_calls=2)
    assert a + b == Bill(11, 22, 33, thinking_tokens=5, server_tool_calls=3)
    assert (a + b).total == pytest.approx(a.total + b.total)
    with pytest.raises(ValueError, match="different price tables"):
        a + Bill(1, 2, 3, Prices(input=5.0))


@pytest.mark.parametrize("field", ["input", "output", "cache_read", "server_tool_call"])
def test_prices_must_be_non_negative_numbers(field):
    with pytest.raises(ValueError, match=f"Prices.{field}"):
        Prices(**{field: -1.0})


def test_a_request_records_its_parts_prefill_answer_and_bill():
    tokenizer = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=32, n_layers=2, n_heads=2)
    client = Client.from_model(Transformer(config).eval(), tokenizer)
    trace = Trace()
    first = client.messages.create(messages=[{"role": "user", "content": "Weather in Pune?"}], system=SYSTEM,
                                   tools=EXAMPLE_TOOLS, max_tokens=6, temperature=0, trace=trace)
    second = client.messages.create(messages=[{"role": "user", "content": "And tomorrow?"}], previous_id=first.id,
                                    max_tokens=6, temperature=0, trace=trace)
    contexts = trace.of_kind("context")
    assert len(contexts) == 2 and len(trace.of_kind("request")) == 2
    only_system = client.messages.render(messages=[], system=SYSTEM)
    for event, reply in zip(contexts, (first, second)):
        parts = event.data
        assert parts["system"] + parts["tools"] + parts["history"] + parts["new_message"] == parts["total"]
        assert parts["total"] == reply.usage.input_tokens + reply.usage.cache_read_input_tokens
        assert parts["system"] == len(only_system) - 1  # all but the <|assistant|> header
    assert contexts[0].data["history"] == 0 and contexts[1].data["history"] > 0
    assert contexts[1].data["tools"] == contexts[0].data["tools"] > 0

    prefills = trace.of_kind("prefill")
    assert [p.data["cache_read_input_tokens"] for p in prefills] == [0, second.usage.cache_read_input_tokens]
    assert prefills[1].data["cache_read_input_tokens"] > 0 and all(p.duration > 0 for p in prefills)
    answers = trace.of_kind("answer")
    assert [a.data["output_tokens"] for a in answers] == [first.usage.output_tokens, second.usage.output_tokens]
    assert [b.data["bill"] for b in trace.of_kind("bill")] == [first.bill, second.bill]
    assert trace.bill().total == pytest.approx(first.cost + second.cost)
    assert trace.bill().cache_read_input_tokens == second.usage.cache_read_input_tokens
    times = [event.t for event in trace.events]
    assert all(t >= 0 for t in times)

    summary = trace.summary()
    for word in ("context", "prefill", "answer", "cache read", "output", "total"):
        assert word in summary


def test_the_timeline_has_a_bar_per_prefill_decode_and_tool_run():
    from llmkit.viz.trace import plot_trace, timeline_rows

    trace = Trace()
    trace.add("prefill", t=0.0, duration=0.010, input_tokens=40, cache_read_input_tokens=16)
    trace.add("answer", t=0.010, duration=0.050, output_tokens=12, stop_reason="tool_use", text="")
    trace.add("tool_call", t=0.061, duration=0.002, name="get_weather", input={"city": "Pune"}, is_error=False)
    trace.add("bill", bill=Bill(40, 16, 12))
    rows = timeline_rows(trace)
    assert [row["kind"] for row in rows] == ["prefill", "answer", "tool_call"]
    assert rows[1]["start"] == pytest.approx(10.0) and rows[1]["end"] == pytest.approx(60.0)
    assert "16 cached" in rows[0]["label"] and rows[2]["label"] == "get_weather"
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    figure = plot_trace(trace)
    ax = figure.axes[0]
    assert len(ax.patches) == 3 and ax.get_xlabel() and "$" in ax.get_title()
