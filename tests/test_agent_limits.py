"""run_agent always returns its transcript: a model that keeps calling tools, a tool result longer
than the window, a permission hook that fails, and a client that raises."""
from __future__ import annotations

import random

import pytest
import torch

from llmkit.chat.agent import run_agent
from llmkit.chat.agent_context import CUT_NOTE, make_room
from llmkit.chat.client import Client
from llmkit.chat.message import ContextWindowError
from llmkit.chat.template import render
from llmkit.chat.tools import tool
from llmkit.course.tools import EXAMPLE_TOOLS, count_letters
from llmkit.model.transformer import ModelConfig
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from scripted_model import ScriptedModel

TOKENIZER = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
COUNT_CALL = '<|tool_call|>{"name": "count_letters", "input": {"word": "strawberry", "letter": "r"}}<|end_tool_call|>'


class ScriptedTurns:
    """A real client over a ScriptedModel that writes ``turns[i]`` as its i-th reply (the last one
    forever): the real template, context check, constraint and generation loop all run."""

    def __init__(self, turns: list[str], context_length: int):
        torch.manual_seed(0)
        config = ModelConfig.llama(vocab_size=TOKENIZER.vocab_size, context_length=context_length, d_model=32,
                                   n_layers=2, n_heads=2)
        self.model = ScriptedModel(config, []).eval()
        self.client = Client.from_model(self.model, TOKENIZER)
        self.turns, self.sent = turns, []
        self.messages = self
        self.count_tokens = self.client.count_tokens

    def create(self, *, messages, tools, **kwargs):
        self.model.prompt_length = len(self.client.messages.render(messages=messages, tools=tools))
        turn = self.turns[min(len(self.sent), len(self.turns) - 1)]
        self.model.script = TOKENIZER.encode(turn, allowed_special="all")
        reply = self.client.messages.create(messages=messages, tools=tools, **kwargs)  # raises if it does not fit
        self.sent.append(messages)
        return reply


def tool_results(messages: list[dict]) -> list[dict]:
    return [block for message in messages if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"] if block["type"] == "tool_result"]


def test_a_model_that_keeps_calling_tools_has_its_oldest_exchanges_dropped_not_its_transcript():
    client = ScriptedTurns([COUNT_CALL], context_length=256)
    question = [{"role": "user", "content": "How many r's are in strawberry?"}]
    result = run_agent(client, question, [count_letters], max_iterations=10, max_tokens=100, temperature=0)
    assert result.stop_reason == "max_iterations" and result.stopped_by_limit and result.iterations == 10
    assert len(result.transcript) == 1 + 2 * 10 and [b["content"] for b in tool_results(result.transcript)] == ["3"] * 10
    assert any(note.startswith("dropped the oldest tool exchange") for note in result.notes)
    last = client.sent[-1]
    assert last[0] == question[0] and len(last) < len(result.transcript) - 1  # the question stays; old calls went
    assert last[-1] == result.transcript[-3] and last[-2] == result.transcript[-4]  # the newest exchange stays


@tool
def read_log(lines: int) -> str:
    """Return the last lines of the server log.

    Args:
        lines: How many lines.
    """
    return "".join(f"line {i}: all quiet\n" for i in range(lines))


def test_a_result_longer_than_the_window_is_cut_with_a_note_and_kept_whole_in_the_transcript():
    call = '<|tool_call|>{"name": "read_log", "input": {"lines": 400}}<|end_tool_call|>'
    client = ScriptedTurns([call, "All quiet.<|end_turn|>"], context_length=256)
    result = run_agent(client, [{"role": "user", "content": "Anything in the log?"}], [read_log],
                       max_iterations=3, max_tokens=60, temperature=0)
    assert result.stop_reason == "answered" and result.final.text == "All quiet."
    full = read_log(lines=400)
    [kept] = tool_results(result.transcript)
    assert kept["content"] == full  # nothing lost from the record
    [sent] = tool_results(client.sent[-1])
    note = sent["content"][sent["content"].index("\n[cut by the harness"):]
    shown = sent["content"][: -len(note)]
    assert full.startswith(shown) and note == CUT_NOTE.format(shown=len(shown), total=len(full))
    assert len(client.client.messages.render(messages=client.sent[-1], tools=[read_log])) < 256
    assert any("cut the tool result" in note for note in result.notes)


def test_a_question_too_long_for_the_window_stops_with_a_reason():
    client = ScriptedTurns(["Hi.<|end_turn|>"], context_length=64)
    question = [{"role": "user", "content": "word " * 200}]
    result = run_agent(client, question, EXAMPLE_TOOLS, max_tokens=8)
    assert result.stop_reason == "context_window" and isinstance(result.error, ContextWindowError)
    assert result.final is None and result.iterations == 0 and result.transcript == question


class FakeClient:
    """Replies with one fixed tool call, or raises ``failure`` on the second request."""

    def __init__(self, failure: Exception | None = None):
        self.failure, self.calls = failure, 0
        self.messages = self

    def create(self, *, messages, tools, **kwargs):
        render(TOKENIZER, messages, tools=tools)
        self.calls += 1
        if self.failure is not None and self.calls == 2:
            raise self.failure
        from llmkit.chat.message import Message
        from llmkit.chat.trace import Bill
        from llmkit.generation.generate import Usage
        content = [{"type": "tool_use", "id": f"toolu_{self.calls}", "name": "count_letters",
                    "input": {"word": "strawberry", "letter": "r"}}]
        return Message(id="msg", content=content, stop_reason="tool_use", usage=Usage(input_tokens=1, output_tokens=1),
                       bill=Bill(1, 0, 1))


@pytest.mark.parametrize("approve, error", [
    (lambda name, arguments: 1 / 0, ZeroDivisionError),
    (lambda name, arguments: "maybe", ValueError),
])
def test_a_failing_permission_hook_runs_nothing_and_stops_with_the_transcript(approve, error):
    result = run_agent(FakeClient(), [{"role": "user", "content": "count"}], EXAMPLE_TOOLS, approve=approve,
                       max_iterations=5)
    assert result.stop_reason == "approve_failed" and isinstance(result.error, error) and result.iterations == 1
    [answer] = tool_results(result.transcript)
    assert answer["is_error"] and answer["content"].startswith("not run: the permission check failed")
    render(TOKENIZER, result.transcript, tools=EXAMPLE_TOOLS)  # a whole conversation, ready to continue


def test_any_other_client_error_propagates_carrying_the_transcript():
    with pytest.raises(RuntimeError, match="the server went away") as raised:
        run_agent(FakeClient(RuntimeError("the server went away")), [{"role": "user", "content": "count"}],
                  EXAMPLE_TOOLS, max_iterations=5)
    partial = raised.value.agent_result
    assert partial.iterations == 1 and len(partial.transcript) == 3 and tool_results(partial.transcript)[0]["content"] == "3"


def test_making_room_always_leaves_a_valid_conversation_and_never_grows_it():
    rng = random.Random(0)
    for _ in range(40):
        context = [{"role": "user", "content": "question"}]
        for i in range(rng.randint(1, 5)):
            context.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": f"toolu_{i}", "name": "count_letters", "input": {"word": "a", "letter": "a"}}]})
            context.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "x" * rng.randint(0, 3000)}]})
        counts = [len(render(TOKENIZER, context))]
        while (note := make_room(context, rng.randint(1, 500), lambda text: len(TOKENIZER.encode(text)))) is not None:
            assert note
            render(TOKENIZER, context)  # still a valid conversation
            counts.append(len(render(TOKENIZER, context)))
        assert len(tool_results(context)) == 1  # in the end only the newest exchange is left
        assert all(later < earlier for earlier, later in zip(counts, counts[1:]))  # every step makes room
        [last] = tool_results(context)
        assert "[cut by the harness" not in last["content"] or last["content"].count("[cut by the harness") == 1
