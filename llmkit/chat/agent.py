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

And whatever happens, the loop returns its transcript. What it does when things go wrong:

- **The conversation outgrows the context window** (a model that keeps calling tools, or one
  huge result). The loop keeps the ``transcript`` whole but sends the model less: first it drops
  the oldest tool exchanges (a call and its result, together), keeping the newest; then it cuts
  the longest tool result, ending it with a visible note that says how much was cut. If even that
  cannot make the request fit, it stops with ``stop_reason`` "context_window". A reply that the
  full window cut off (stop reason "context_window": half a tool call, say) is asked for again
  once room is made; ``AgentResult.notes`` lists every drop, cut and retry.
- **The ``approve`` hook raises** (or answers something other than "allow" or "deny"). A broken
  permission check must not run the tool, so the call gets an error result ("not run"), and the
  loop stops with ``stop_reason`` "approve_failed" and the exception in ``AgentResult.error``.
- **Anything else the client raises** is a bug, not a state of the conversation: it propagates,
  carrying the ``AgentResult`` so far as ``exception.agent_result``.

``client`` is anything with ``client.messages.create(...)`` returning an ``llmkit.chat.message.Message``
(so a scripted fake client can test the loop without a model).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from llmkit.chat.agent_context import make_room
from llmkit.chat.message import ContextWindowError
from llmkit.chat.tools import DEFAULT_TIMEOUT_S, Approve, Tool, run_tool_call, tool_result, tools_by_name
from llmkit.chat.trace import Trace
from llmkit.checks import check_int, is_int

STOP_REASONS = ("answered", "max_iterations", "context_window", "approve_failed")


@dataclass
class AgentResult:
    """``final``: the last reply (None if the model never answered); ``transcript``: every message,
    the replies and tool results included, in full; ``iterations``: how many replies the model gave;
    ``stop_reason``: why the loop ended, one of ``STOP_REASONS`` ("answered": the model stopped asking
    for tools, and ``final.stop_reason`` says how it stopped); ``error``: the exception that ended
    the loop early, if any; ``notes``: what was dropped or cut to fit the context window.

    A reply cut off by ``max_tokens`` in the middle of a tool call ends the loop too (its stop
    reason is "max_tokens", not "tool_use"): raise ``max_tokens`` and run it again."""

    final: Any
    transcript: list[dict]
    iterations: int
    stop_reason: str = "answered"
    error: BaseException | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def stopped_by_limit(self) -> bool:
        """True if ``max_iterations`` ran out while the model still wanted a tool."""
        return self.stop_reason == "max_iterations"


class _ApproveFailed(Exception):
    """The approve hook raised or answered something else than "allow" or "deny"."""


def run_agent(client, messages: list[dict], tools: list[Tool], *, max_iterations: int = 5,
              approve: Approve | None = None, tool_timeout_s: float = DEFAULT_TIMEOUT_S,
              trace: Trace | None = None, **create_kwargs: Any) -> AgentResult:
    """Run the tool-use loop until the model answers or ``max_iterations`` model calls are spent.

    tools: ``llmkit.chat.tools.Tool`` objects, passed to every ``create`` (which sends the model their
        definitions and runs the server tools among them itself).
    approve: the permission hook, ``approve(name, arguments) -> "allow" | "deny"``, asked before
        each client tool runs; a denied call is answered with an error result and the model
        carries on. (Server tools run inside ``create``, as a provider runs them: no hook is asked.)
    tool_timeout_s: the time limit of one tool call (an error result when it is over).
    create_kwargs: passed to every ``client.messages.create`` (max_tokens, system, temperature, ...).
    """
    check_int("max_iterations", max_iterations, minimum=1)
    if "messages" in create_kwargs or "tools" in create_kwargs:
        raise TypeError("pass messages and tools as run_agent's own arguments, not as create arguments")
    tools = list(tools)
    tools_by_name(tools)  # refuses non-Tool items and repeated names now, not mid-loop
    if trace is not None:
        create_kwargs["trace"] = trace
    result = AgentResult(None, copy.deepcopy(messages), 0)
    context = copy.deepcopy(messages)  # what the model is sent: the transcript, less what no longer fits
    try:
        _loop(client, context, tools, result, max_iterations, approve, tool_timeout_s, trace, create_kwargs)
    except Exception as exc:
        exc.agent_result = result
        raise
    return result


def _loop(client, context: list[dict], tools: list[Tool], result: AgentResult, max_iterations: int, approve,
          timeout_s: float, trace: Trace | None, create_kwargs: dict) -> None:
    """The loop itself, filling in ``result`` as it goes (so nothing is lost if it raises)."""
    count_tokens = getattr(client, "count_tokens", None)
    while result.iterations < max_iterations:
        try:
            reply = _ask(client, context, tools, create_kwargs, result.notes, count_tokens)
            while reply.stop_reason == "context_window":  # the window filled up while the model wrote
                note = make_room(context, _room_wanted(reply, create_kwargs), count_tokens)
                if note is None:
                    break  # nothing more can go: the cut-off reply is the answer, and says why it stopped
                result.notes.append(f"{note}; the reply the full window had cut off was asked for again")
                reply = _ask(client, context, tools, create_kwargs, result.notes, count_tokens)
        except ContextWindowError as exc:
            result.stop_reason, result.error = "context_window", exc
            return
        result.final, result.iterations = reply, result.iterations + 1
        turn = {"role": "assistant", "content": copy.deepcopy(reply.content)}
        result.transcript.append(turn)
        context.append(copy.deepcopy(turn))
        calls = [block for block in reply.content if block["type"] == "tool_use"]
        if reply.stop_reason != "tool_use" or not calls:
            _record_final(trace, reply)
            return
        answers = _answer_all(calls, tools, approve, timeout_s, trace, count_tokens, result)
        result.transcript.append({"role": "user", "content": answers})
        context.append({"role": "user", "content": copy.deepcopy(answers)})
        if result.error is not None:
            return
    result.stop_reason = "max_iterations"
    _record_final(trace, result.final)


def _ask(client, context: list[dict], tools: list[Tool], create_kwargs: dict, notes: list[str], count_tokens):
    """One model call; while the request does not fit the window, make room in ``context`` and retry."""
    while True:
        try:
            return client.messages.create(messages=copy.deepcopy(context), tools=tools, **create_kwargs)
        except ContextWindowError as exc:
            note = make_room(context, exc.over_by, count_tokens)
            if note is None:
                raise
            notes.append(note)


def _room_wanted(reply, create_kwargs: dict) -> int:
    """Tokens more that a reply cut off by the window needed: the rest of its ``max_tokens`` budget
    (or as many again as it wrote, when the budget is unknown)."""
    written = max(1, reply.usage.output_tokens)
    budget = create_kwargs.get("max_tokens")
    return max(1, budget - written) if is_int(budget) else written


def _answer_all(calls: list[dict], tools: list[Tool], approve, timeout_s: float, trace: Trace | None,
                count_tokens, result: AgentResult) -> list[dict]:
    """A tool_result for every call; once the approve hook fails, the rest are not run either."""
    answers = []
    for call in calls:
        if result.error is not None:
            answers.append(tool_result(call["id"], "not run: the harness stopped before this call", is_error=True))
            continue
        try:
            answers.append(_answer(call, tools, approve, timeout_s, trace, count_tokens))
        except _ApproveFailed as failed:
            result.stop_reason, result.error = "approve_failed", failed.__cause__
            answers.append(tool_result(call["id"], f"not run: the permission check failed ({failed.__cause__!r})",
                                       is_error=True))
    return answers


def _answer(call: dict, tools: list[Tool], approve, timeout_s: float, trace: Trace | None, count_tokens) -> dict:
    """Run one tool_use block and return its tool_result; a malformed call is an error result."""
    started = time.perf_counter()
    t = trace.now() if trace is not None else 0.0
    if "error" in call:  # the chat template could not read the call (bad JSON, wrong shape, cut off)
        result = tool_result(call["id"], call["error"], is_error=True)
    else:
        result = run_tool_call(tools, call["name"], call["input"], tool_use_id=call["id"],
                               timeout_s=timeout_s, approve=_guarded(approve))
    if trace is not None:
        trace.add("tool_call", t=t, duration=time.perf_counter() - started, name=call.get("name", ""),
                  input=call.get("input"), is_error=result["is_error"])
        tokens = count_tokens(result["content"]) if callable(count_tokens) else None
        trace.add("tool_result", tokens=tokens, content=result["content"], is_error=result["is_error"])
    return result


def _guarded(approve: Approve | None) -> Approve | None:
    """``approve``, with any failure of the hook itself raised as ``_ApproveFailed``."""
    if approve is None:
        return None

    def checked(name: str, arguments: dict) -> str:
        try:
            decision = approve(name, arguments)
        except Exception as exc:
            raise _ApproveFailed() from exc
        if decision not in ("allow", "deny"):
            problem = ValueError(f"approve must return 'allow' or 'deny', got {decision!r}")
            raise _ApproveFailed() from problem
        return decision

    return checked


def _record_final(trace: Trace | None, reply) -> None:
    if trace is not None and reply is not None:
        text = "".join(block.get("text", "") for block in reply.content if block["type"] == "text")
        trace.add("final", text=text, stop_reason=reply.stop_reason)
