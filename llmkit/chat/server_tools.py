"""Server tools: tools the client runs itself, inside one request, the way a hosted API runs its
web search.

A ``Tool`` marked ``server`` (``@tool(server=True)``, e.g. ``web_search``) is run by the client
when the model calls it: the call and its result go into the context as the chat template writes
them, and the model generates again. The reply holds ``server_tool_use`` and
``server_tool_result`` blocks among the text. A client tool's call still ends the turn with
"tool_use", for your code (or ``run_agent``) to run. At most ``MAX_SERVER_CALLS`` calls run per
request; later ones get an error result, so a model that keeps searching cannot loop.
"""
from __future__ import annotations

import copy
import re
import time

from llmkit.chat.tools import Tool, run_tool_call
from llmkit.chat.trace import Trace

MAX_SERVER_CALLS = 3  # server tool runs per request; later calls get an error result instead
SERVER_LIMIT_ERROR = (f"refused: at most {MAX_SERVER_CALLS} server tool calls per request; "
                      f"answer with the results you have")


def server_tools(tools: list) -> dict[str, Tool]:
    """The offered tools the client runs itself: ``Tool`` objects marked ``server`` (a bare
    definition dict has no function to run, so it is always a client tool)."""
    return {item.name: item for item in tools if isinstance(item, Tool) and item.server}


def _written_name(raw: str) -> str | None:
    """The tool name at the start of a call's raw JSON, once the model has written it."""
    match = re.match(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"', raw)
    return match.group(1) if match else None


def call_name(block: dict) -> str | None:
    """The tool a ``tool_use`` block calls, also while its JSON is still being written."""
    return block["name"] or (_written_name(block["input"]) if isinstance(block["input"], str) else None)


def label_server_calls(blocks: list[dict], servers: dict[str, Tool]) -> list[dict]:
    """For streaming: a tool call to a server tool is shown as "server_tool_use"; while no name is
    written yet (and server tools are offered) the call is held back, since its type is unknown."""
    if not servers:
        return blocks
    labelled = []
    for block in blocks:
        if block["type"] == "tool_use":
            name = call_name(block)
            if name in servers:
                block = {**block, "type": "server_tool_use"}
            elif name is None and isinstance(block["input"], str):
                block = {**block, "input": ""}
        labelled.append(block)
    return labelled


def server_call(stop_reason: str, blocks: list[dict], servers: dict[str, Tool]) -> dict | None:
    """The tool_use block that ended this generation, if it calls a server tool (else None)."""
    if stop_reason != "tool_use" or not blocks or blocks[-1]["type"] != "tool_use":
        return None
    return blocks[-1] if call_name(blocks[-1]) in servers else None


def run_server_call(call: dict, servers: dict[str, Tool], earlier: int, call_id: str,
                    trace: Trace | None, tokenizer) -> tuple[dict, dict]:
    """Run one server tool call: its ``server_tool_use`` block and ``server_tool_result`` block.

    Like a harness answering a client call, every failure (a malformed call, bad arguments, the tool
    raising or hanging) becomes an error result the model reads; past ``MAX_SERVER_CALLS`` calls in
    one request the call is refused the same way.
    """
    name = call_name(call)
    use = {"type": "server_tool_use", "id": call_id, "name": name, "input": copy.deepcopy(call["input"])}
    started = time.perf_counter()
    t = trace.now() if trace is not None else 0.0
    if earlier >= MAX_SERVER_CALLS:
        content, is_error = SERVER_LIMIT_ERROR, True
    elif "error" in call:  # the template could not read the call (bad JSON, wrong shape)
        content, is_error = call["error"], True
    else:
        outcome = run_tool_call(list(servers.values()), name, call["input"], tool_use_id=call_id)
        content, is_error = outcome["content"], outcome["is_error"]
    result = {"type": "server_tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
    if trace is not None:
        trace.add("tool_call", t=t, duration=time.perf_counter() - started, name=name, input=use["input"],
                  is_error=is_error, server=True)
        tokens = len(tokenizer.encode(content, disallowed_special=()))
        trace.add("tool_result", tokens=tokens, content=content, is_error=is_error, server=True)
    return use, result
