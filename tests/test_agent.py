"""run_agent: the tool-use loop, driven by a scripted fake client so every malformed case is certain,
then once on a small random model to show that nothing the model writes can crash the loop."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch

from llmkit.chat.agent import AgentResult, run_agent
from llmkit.chat.template import render
from llmkit.chat.client import Client, Message
from llmkit.generation.generate import Usage
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.chat.tools import run_tool_call, tool
from llmkit.course.tools import EXAMPLE_TOOLS, get_weather, web_search
from llmkit.chat.trace import Bill, Trace
from scripted_model import ScriptedModel

TOKENIZER = Tokenizer.load(data_path("models", "base", "tokenizer.json"))


def reply(*content: dict, stop_reason: str | None = None) -> Message:
    if stop_reason is None:
        stop_reason = "tool_use" if content and content[-1]["type"] == "tool_use" else "end_turn"
    return Message(id="msg_fake", content=list(content), stop_reason=stop_reason,
                   usage=Usage(input_tokens=10, output_tokens=5), bill=Bill(10, 0, 5))


def call(name: str, tool_input, call_id: str = "toolu_1") -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def text(words: str) -> dict:
    return {"type": "text", "text": words}


class ScriptedClient:
    """Returns the scripted replies in order (the last one forever) and checks every request is a
    conversation the real chat template accepts."""

    def __init__(self, *replies: Message):
        self.replies, self.requests = list(replies), []
        self.messages = self  # so client.messages.create works

    def create(self, *, messages, tools, **kwargs):
        render(TOKENIZER, messages, tools=tools)  # raises if the loop built a broken conversation
        self.requests.append({"messages": messages, "tools": tools, **kwargs})
        scripted = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
        content = [{**block, "id": f"toolu_{len(self.requests)}"} if block["type"] == "tool_use" else block
                   for block in scripted.content]  # a fresh id per reply, as a real client gives
        return dataclasses.replace(scripted, content=content)


def results_of(result: AgentResult) -> list[dict]:
    return [block for message in result.transcript if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"] if block["type"] == "tool_result"]


def test_the_loop_runs_the_tool_and_sends_the_result_back():
    client = ScriptedClient(reply(call("get_weather", {"city": "Pune", "day": "tomorrow"})), reply(text("Sunny.")))
    question = [{"role": "user", "content": "Weather in Pune tomorrow?"}]
    result = run_agent(client, question, EXAMPLE_TOOLS, max_iterations=4, max_tokens=32, temperature=0)
    assert result.iterations == 2 and not result.stopped_by_limit
    assert result.final.text == "Sunny." and result.final.stop_reason == "end_turn"
    [sent] = results_of(result)
    assert sent["tool_use_id"] == "toolu_1" and not sent["is_error"]
    assert json.loads(sent["content"]) == get_weather(city="Pune", day="tomorrow")
    assert [m["role"] for m in result.transcript] == ["user", "assistant", "user", "assistant"]
    assert client.requests[0]["tools"] == EXAMPLE_TOOLS  # the Tool objects, so server tools keep their flag
    assert client.requests[0]["max_tokens"] == 32 and client.requests[0]["temperature"] == 0
    assert client.requests[1]["messages"] == result.transcript[:3]
    assert question == [{"role": "user", "content": "Weather in Pune tomorrow?"}]  # the caller's list is untouched


@tool
def explode(x: int) -> int:
    """Raise on purpose.

    Args:
        x: Any number.
    """
    raise RuntimeError("boom")


@tool
def hang(x: int) -> int:
    """Sleep far longer than the time limit.

    Args:
        x: Any number.
    """
    time.sleep(3)
    return x


MALFORMED = [
    ({"type": "tool_use", "id": "toolu_1", "name": "", "input": "{not json",
      "error": "the tool call is not valid JSON"}, "not valid JSON"),
    (call("get_time", {}), "unknown tool 'get_time'"),
    (call("get_weather", {"city": 42}), "invalid arguments for get_weather"),
    (call("get_weather", {"city": "Pune", "when": "now"}), "invalid arguments for get_weather"),
    (call("explode", {"x": 1}), "explode failed: RuntimeError: boom"),
    (call("hang", {"x": 1}), "did not finish within 0.2 s"),
]


@pytest.mark.parametrize("bad_call, says", MALFORMED)
def test_malformed_calls_become_error_results_and_the_loop_carries_on(bad_call, says):
    client = ScriptedClient(reply(bad_call), reply(text("Sorry, that failed.")))
    started = time.perf_counter()
    result = run_agent(client, [{"role": "user", "content": "go"}], [get_weather, explode, hang],
                       max_iterations=3, tool_timeout_s=0.2, max_tokens=16)
    assert time.perf_counter() - started < 2.5  # a hanging tool is abandoned, not waited for
    [sent] = results_of(result)
    assert sent["is_error"] and says in sent["content"] and sent["tool_use_id"] == "toolu_1"
    assert result.iterations == 2 and result.final.text == "Sorry, that failed."


def test_the_loop_always_ends_within_max_iterations():
    client = ScriptedClient(reply(call("calculator", {"expression": "1 + 1"})))  # asks for a tool forever
    result = run_agent(client, [{"role": "user", "content": "go"}], EXAMPLE_TOOLS, max_iterations=3, max_tokens=8)
    assert result.iterations == 3 and result.stopped_by_limit and len(client.requests) == 3
    assert result.final.stop_reason == "tool_use"
    assert [r["content"] for r in results_of(result)] == ["2", "2", "2"]
    with pytest.raises(ValueError, match="max_iterations"):
        run_agent(client, [{"role": "user", "content": "go"}], EXAMPLE_TOOLS, max_iterations=0)


def test_a_denied_call_is_not_run_and_the_model_is_told():
    ran, asked = [], []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
        """
        ran.append(path)
        return "deleted"

    def approve(name, arguments):
        asked.append((name, arguments))
        return "deny"

    client = ScriptedClient(reply(call("delete_file", {"path": "notes.txt"})), reply(text("I did not delete it.")))
    result = run_agent(client, [{"role": "user", "content": "delete notes.txt"}], [delete_file], approve=approve,
                       max_tokens=16)
    [sent] = results_of(result)
    assert sent["is_error"] and "denied" in sent["content"]
    assert ran == [] and asked == [("delete_file", {"path": "notes.txt"})]


def test_a_trace_records_each_tool_call_and_result():
    class CountingClient(ScriptedClient):
        def count_tokens(self, words: str) -> int:
            return len(TOKENIZER.encode(words, disallowed_special=()))

    client = CountingClient(reply(call("count_letters", {"word": "strawberry", "letter": "r"})), reply(text("3")))
    trace = Trace()
    run_agent(client, [{"role": "user", "content": "r's in strawberry?"}], EXAMPLE_TOOLS, trace=trace, max_tokens=8)
    [tool_call] = trace.of_kind("tool_call")
    assert tool_call.data["name"] == "count_letters" and not tool_call.data["is_error"] and tool_call.duration >= 0
    [tool_result] = trace.of_kind("tool_result")
    assert tool_result.data["content"] == "3" and tool_result.data["tokens"] == len(TOKENIZER.encode("3"))
    assert trace.of_kind("final")[0].data["text"] == "3"
    assert all(request["trace"] is trace for request in client.requests)


def test_run_agent_refuses_bad_tools_before_calling_the_model():
    client = ScriptedClient(reply(text("hi")))
    with pytest.raises(TypeError, match="Tool objects"):
        run_agent(client, [{"role": "user", "content": "go"}], [get_weather.definition()])
    assert client.requests == []


def test_nothing_a_random_model_writes_crashes_the_loop():
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=TOKENIZER.vocab_size, context_length=256, d_model=32, n_layers=2, n_heads=2)
    client = Client.from_model(Transformer(config).eval(), TOKENIZER)
    for seed in range(3):
        result = run_agent(client, [{"role": "user", "content": "Weather in Pune?"}], EXAMPLE_TOOLS,
                           max_iterations=2, max_tokens=24, temperature=1.0, seed=seed, context_policy="drop_oldest")
        assert 1 <= result.iterations <= 2
        assert result.final.stop_reason in {"end_turn", "max_tokens", "stop_sequence", "tool_use", "context_window"}


def test_a_server_tool_inside_the_loop_is_run_by_the_client_not_the_loop():
    """run_agent hands create the Tool objects, so web_search keeps its server flag: the client runs
    it inside the request and the loop never sees a tool_use for it (with bare definitions it would
    have stopped with "tool_use" and run web_search itself, as a client tool)."""
    question = [{"role": "user", "content": "What is the monsoon like in Pune?"}]
    query = {"query": "monsoon in Pune"}
    found = run_tool_call([web_search], "web_search", query, tool_use_id="s")
    turn = [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": query},
            {"type": "server_tool_result", "tool_use_id": "s", "content": found["content"], "is_error": False},
            text("It rains from June to September.")]
    tools = [web_search, get_weather]
    prompt = render(TOKENIZER, question, tools=tools)
    full = render(TOKENIZER, question + [{"role": "assistant", "content": turn}], tools=tools,
                  add_generation_prompt=False)
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=TOKENIZER.vocab_size, context_length=512, d_model=32, n_layers=2, n_heads=2)
    client = Client.from_model(ScriptedModel(config, full.ids[len(prompt):], len(prompt)).eval(), TOKENIZER)

    trace = Trace()
    result = run_agent(client, question, tools, max_iterations=3, max_tokens=200, temperature=0, trace=trace)
    assert result.iterations == 1 and not result.stopped_by_limit
    assert result.final.stop_reason == "end_turn" and result.final.usage.server_tool_calls == 1
    assert [b["type"] for b in result.final.content] == ["server_tool_use", "server_tool_result", "text"]
    assert result.final.content[1]["content"] == found["content"]  # the real search, run by the client
    assert [m["role"] for m in result.transcript] == ["user", "assistant"] and results_of(result) == []
    [call] = trace.of_kind("tool_call")
    assert call.data["server"] and call.data["name"] == "web_search"  # recorded by the client, not by the loop
