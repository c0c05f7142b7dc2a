"""The agent loop: call the model, run the tool it asks for, send the result back, repeat.

The model never runs anything. It writes a tool call as text; this loop (the harness) reads it,
runs the real function (``llmkit.chat.tools.run_tool_call``), and appends the result to the
conversation, which is sent again in full. It stops when the model answers instead of asking
(any stop reason other than "tool_use") or after ``max_iterations`` calls to the model.

The ``Tool`` objects themselves go to ``create``, not just their definitions, so a *server* tool
(``@tool(server=True)``, e.g. ``web_search``) keeps its flag: the client runs it inside the request
and the reply carries its ``server_tool_use`` and ``server_tool_result`` blocks; this loop only
ever runs the client tools, whose calls end a reply with "tool_use".

Whatever the model writes, the loop does not crash: a call that is not valid JSON, names an
unknown tool, has arguments of the wrong type, or runs a tool that raises or hangs comes back to
the model as an error ``tool_result`` it can read and correct.

``client`` is anything with ``client.messages.create(...)`` returning an ``llmkit.chat.client.Message``
(so a scripted fake client can test the loop without a model).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from llmkit.chat.tools import DEFAULT_TIMEOUT_S, Approve, Tool, run_tool_call, tool_result, tools_by_name
from llmkit.chat.trace import Trace


@dataclass
class AgentResult:
    """``final``: the last reply; ``transcript``: every message, the replies and tool results
    included; ``iterations``: how many times the model was called; ``stopped_by_limit``: True if
    the loop ended because ``max_iterations`` ran out while the model still wanted a tool.

    A reply cut off by ``max_tokens`` in the middle of a tool call ends the loop too (its stop
    reason is "max_tokens", not "tool_use"): raise ``max_tokens`` and run it again."""

    final: Any
    transcript: list[dict]
    iterations: int
    stopped_by_limit: bool = False


def run_agent(client, messages: list[dict], tools: list[Tool], *, max_iterations: int = 5,
              approve: Approve | None = None, tool_timeout_s: float = DEFAULT_TIMEOUT_S,
              trace: Trace | None = None, **create_kwargs: Any) -> AgentResult:
    """Run the tool-use loop until the model answers or ``max_iterations`` model calls are spent.

    tools: ``llmkit.chat.tools.Tool`` objects, passed to every ``create`` (which sends the model their
        definitions and runs the server tools among them itself).
    approve: the permission hook, ``approve(name, arguments) -> "allow" | "deny"``, asked before
        each client tool runs; a denied call is answered with an error result and the model
        carries on. (Server tools run inside ``create``, as a provider runs them: no hook is asked.)
    tool_timeout_s: how long one tool may run before it is abandoned (an error result).
    create_kwargs: passed to every ``client.messages.create`` (max_tokens, system, temperature, ...).
    """
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
        raise ValueError(f"max_iterations must be a whole number >= 1, got {max_iterations!r}")
    if "messages" in create_kwargs or "tools" in create_kwargs:
        raise TypeError("pass messages and tools as run_agent's own arguments, not as create arguments")
    tools = list(tools)
    tools_by_name(tools)  # refuses non-Tool items and repeated names now, not mid-loop
    if trace is not None:
        create_kwargs["trace"] = trace
    transcript = copy.deepcopy(messages)
    count_tokens = getattr(client, "count_tokens", None)

    for iteration in range(1, max_iterations + 1):
        reply = client.messages.create(messages=copy.deepcopy(transcript), tools=tools, **create_kwargs)
        transcript.append({"role": "assistant", "content": copy.deepcopy(reply.content)})
        calls = [block for block in reply.content if block["type"] == "tool_use"]
        if reply.stop_reason != "tool_use" or not calls:
            _record_final(trace, reply)
            return AgentResult(reply, transcript, iteration)
        results = [_answer(call, tools, approve, tool_timeout_s, trace, count_tokens) for call in calls]
        transcript.append({"role": "user", "content": results})
    _record_final(trace, reply)
    return AgentResult(reply, transcript, max_iterations, stopped_by_limit=True)


def _answer(call: dict, tools: list[Tool], approve, timeout_s: float, trace: Trace | None, count_tokens) -> dict:
    """Run one tool_use block and return its tool_result; a malformed call is an error result."""
    started = time.perf_counter()
    t = trace.now() if trace is not None else 0.0
    if "error" in call:  # the chat template could not read the call (bad JSON, wrong shape, cut off)
        result = tool_result(call["id"], call["error"], is_error=True)
    else:
        result = run_tool_call(tools, call["name"], call["input"], tool_use_id=call["id"],
                               timeout_s=timeout_s, approve=approve)
    if trace is not None:
        trace.add("tool_call", t=t, duration=time.perf_counter() - started, name=call.get("name", ""),
                  input=call.get("input"), is_error=result["is_error"])
        tokens = count_tokens(result["content"]) if callable(count_tokens) else None
        trace.add("tool_result", tokens=tokens, content=result["content"], is_error=result["is_error"])
    return result


def _record_final(trace: Trace | None, reply) -> None:
    if trace is not None:
        text = "".join(block.get("text", "") for block in reply.content if block["type"] == "text")
        trace.add("final", text=text, stop_reason=reply.stop_reason)
