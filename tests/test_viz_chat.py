"""Notebook 08's pictures, headless: finding a name's tokens in a prompt, the prompt as chips, a
message on one line, a conversation growing (plot, fill bar, slider) and the caching comparison.
Conversations run on a tiny random model through the real client: nonsense replies, real tokens."""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from llmkit.chat.client import Client  # noqa: E402
from llmkit.course.tools import get_weather  # noqa: E402
from llmkit.chat.trace import Trace  # noqa: E402
from llmkit.viz import chat as vc  # noqa: E402
from llmkit.chat.trace import request_rows  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
SYSTEM = "You are a helpful assistant."
WINDOW = 256


@pytest.fixture(scope="module")
def model(tokenizer, tiny_llama):
    return tiny_llama(tokenizer.vocab_size, context_length=WINDOW)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def conversation(model, tokenizer, *, cache: bool, turns: int = 4):
    """A chat loop that re-sends the history, on a fresh client: its trace's rows, and the client."""
    client, trace, messages = Client.from_model(model, tokenizer), Trace(), []
    for text in ["My name is Ada.", "Who wrote Hamlet?", "What is a token?", "Thank you!"][:turns]:
        messages.append({"role": "user", "content": text})
        reply = client.messages.create(messages=messages, system=SYSTEM, max_tokens=6, temperature=0, cache=cache,
                                       trace=trace)
        messages.append(reply.to_param())
    return request_rows(trace), client


@pytest.fixture(scope="module")
def rows(model, tokenizer):
    return conversation(model, tokenizer, cache=False)[0]


def test_text_positions_finds_every_token_of_a_name(model, tokenizer):
    client = Client.from_model(model, tokenizer)
    history = [*ask("My name is Ada."), {"role": "assistant", "content": "Nice to meet you, Ada!"},
               *ask("What's my name?")]
    prompt = client.messages.render(messages=history, system=SYSTEM)
    positions = vc.text_positions(tokenizer, prompt, "Ada")
    runs: list[list[int]] = []  # consecutive positions: one run per mention
    for i in positions:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    assert len(runs) == tokenizer.decode(prompt.ids).count("Ada") == 2  # the user's message and the reply
    for run in runs:  # each run spells the name, and none of its tokens could be left out
        spelled = b"".join(tokenizer.token_bytes(prompt.ids[i]) for i in run)
        assert b"Ada" in spelled
        assert b"Ada" not in b"".join(tokenizer.token_bytes(prompt.ids[i]) for i in run[1:])
        assert b"Ada" not in b"".join(tokenizer.token_bytes(prompt.ids[i]) for i in run[:-1])
    alone = client.messages.render(messages=ask("What's my name?"), system=SYSTEM)
    assert vc.text_positions(tokenizer, alone, "Ada") == []
    assert vc.text_positions(tokenizer, alone, "name") != []
    with pytest.raises(ValueError, match="non-empty string"):
        vc.text_positions(tokenizer, alone, "")


def test_a_mention_split_across_tokens_marks_all_of_them(tokenizer, model):
    client = Client.from_model(model, tokenizer)
    prompt = client.messages.render(messages=ask("Ada"))
    positions = vc.text_positions(tokenizer, prompt, "Ada")
    assert b"".join(tokenizer.token_bytes(prompt.ids[i]) for i in positions) == b"Ada"
    assert set(vc.text_positions(tokenizer, prompt, "da")) <= set(positions)


def test_prompt_html_outlines_the_name_and_marks_the_breakpoint(model, tokenizer):
    client = Client.from_model(model, tokenizer)
    prompt = client.messages.render(messages=ask("My name is Ada."), system=SYSTEM, tools=[get_weather])
    stable = prompt.roles.count("system") + prompt.roles.count("tools")
    page = vc.prompt_html(tokenizer, prompt, highlight="Ada", breakpoint=stable)
    marked = vc.text_positions(tokenizer, prompt, "Ada")
    assert page.count("3px solid #dc3545") == len(marked) > 0
    assert f"{len(prompt)} tokens; &#x27;Ada&#x27; is in this prompt: {len(marked)} tokens" in page
    assert page.count("cache breakpoint") == 1 and page.count("<code") == len(prompt)
    before = page.index("cache breakpoint")  # the marker sits after the last tools token, before <|user|>
    assert "&lt;|tools|&gt;" in page[:before] and "&lt;|user|&gt;" in page[before:]
    absent = vc.prompt_html(tokenizer, prompt, highlight="Grace")
    assert "is not in this prompt" in absent and "3px solid #dc3545" not in absent
    with pytest.raises(ValueError, match="breakpoint"):
        vc.prompt_html(tokenizer, prompt, breakpoint=len(prompt) + 1)


def test_message_line_names_every_kind_of_block():
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Pune"}}
    assert vc.message_line(ask("Hi")[0]) == "     user: Hi"
    line = vc.message_line({"role": "assistant", "content": [{"type": "thinking", "thinking": "Check."}, call]})
    assert line == "assistant: [thinking: Check.] [tool call: get_weather(city='Pune')]"
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain", "is_error": True}
    assert vc.message_line({"role": "user", "content": [result]}) == "     user: [tool result (error): rain]"
    search = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "Pune"}},
              {"type": "server_tool_result", "tool_use_id": "srvtoolu_1", "content": "rain", "is_error": False}]
    assert vc.message_line({"role": "assistant", "content": search}) == (
        "assistant: [server tool call: web_search(query='Pune')] [server tool result: rain]")
    long = vc.message_line(ask("word " * 50)[0], limit=20)
    assert long.endswith("…") and len(long.split(": ", 1)[1]) == 20


def test_growth_plot_stacks_each_request_and_marks_the_window(rows):
    assert [row.history for row in rows][0] == 0 and all(a.history < b.history for a, b in zip(rows, rows[1:]))
    fig = vc.plot_chat_growth(rows, WINDOW)
    left, right = fig.axes
    assert left.get_xlabel() and left.get_ylabel() and right.get_ylabel() == "dollars" and fig._suptitle.get_text()
    first_turn = [p.get_height() for p in left.patches if abs(p.get_x() + p.get_width() / 2 - 1) < 0.01]
    assert sum(first_turn) == pytest.approx(rows[0].prompt_tokens + rows[0].usage.output_tokens)
    assert any(line.get_ydata()[0] == WINDOW for line in left.get_lines())
    costs = [p.get_height() for p in right.patches]
    assert costs == pytest.approx([row.cost for row in rows])
    partial = vc.plot_chat_growth(rows, WINDOW, upto=2)
    assert len(partial.axes[1].patches) == 2 and partial.axes[0].get_xlim() == left.get_xlim()
    with pytest.raises(ValueError, match="upto"):
        vc.plot_chat_growth(rows, WINDOW, upto=len(rows) + 1)
    with pytest.raises(ValueError, match="rows is empty"):
        vc.plot_chat_growth([], WINDOW)


def test_fill_bar_widths_are_shares_of_the_window(rows):
    row = rows[-1]
    page = vc.context_fill_html(row, WINDOW)
    widths = [float(w) for w in re.findall(r"width:([\d.]+)%", page)]
    assert sum(widths) == pytest.approx(100 * (row.prompt_tokens + row.usage.output_tokens) / WINDOW, abs=0.05)
    assert f"{row.prompt_tokens + row.usage.output_tokens} of {WINDOW} tokens" in page
    with pytest.raises(ValueError, match="context_window"):
        vc.context_fill_html(row, 0)


def test_the_slider_redraws_bill_and_fill(rows):
    widget = vc.chat_growth_slider(rows, WINDOW)
    slider, text, picture = widget.children
    assert (slider.min, slider.max, slider.value) == (1, len(rows), 1)
    seen = {(text.value, bytes(picture.value))}
    for turn in range(2, len(rows) + 1):
        slider.value = turn
        assert (text.value, bytes(picture.value)) not in seen
        seen.add((text.value, bytes(picture.value)))
    assert f"${sum(row.cost for row in rows):.6f}" in text.value  # the whole bill at the last turn


def test_caching_plot_compares_the_same_conversation(model, tokenizer, rows):
    cached_runs = [conversation(model, tokenizer, cache=True)[0] for _ in range(2)]
    assert [r.text for r in cached_runs[0]] == [r.text for r in rows]  # the cache never changes the reply
    assert cached_runs[0][-1].usage.cache_read_input_tokens > 0 and rows[-1].usage.cache_read_input_tokens == 0
    fig = vc.plot_caching(cached_runs, [rows])
    left, middle, right = fig.axes
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    heights = [p.get_height() for p in left.patches]
    assert heights[:len(rows)] == [r.usage.cache_read_input_tokens for r in cached_runs[0]]
    assert len(middle.get_lines()) == 2 and len(right.patches) == 2 * len(rows)
    with pytest.raises(ValueError, match="same turns"):
        vc.plot_caching(cached_runs, [rows[:2]])
