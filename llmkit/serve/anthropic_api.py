"""The Anthropic Messages API on top of the chat client: request JSON in, reply JSON or SSE out.

The chat client (``llmkit.chat.client``) already speaks in Messages-API terms (content blocks,
stop reasons, usage); this module only checks the wire format, renames what differs (a web
search's result is a ``web_search_tool_result`` block on the wire), and lays a streamed reply out
as the event sequence the SDK's ``messages.stream`` expects:

    message_start, then per block: content_block_start, content_block_delta..., content_block_stop,
    then message_delta (stop reason, usage), message_stop; ``ping`` now and then.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

from llmkit.serve.requests import ChatRequest, check_sampling, check_tools_limit, expect

# temperature, top_p and top_k are not in the newest SDK's signature; send them with extra_body={...}
REQUEST_FIELDS = {"model", "max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences",
                  "temperature", "top_p", "top_k", "thinking", "metadata", "stream", "service_tier",
                  "cache_control", "inference_geo", "speed", "diagnostics", "user_profile_id", "workspace_id"}
DROPPED_KEYS = ("cache_control", "citations", "signature")  # accepted, meaningless to this model
STOP_REASONS = {"end_turn": "end_turn", "max_tokens": "max_tokens", "stop_sequence": "stop_sequence",
                "tool_use": "tool_use", "context_window": "model_context_window_exceeded"}


def parse_request(body: Any, server_tools: dict, max_tools: int) -> ChatRequest:
    """Check a /v1/messages body and turn it into the chat client's arguments."""
    expect(isinstance(body, dict), "the request body must be a JSON object")
    unknown = sorted(set(body) - REQUEST_FIELDS)
    expect(not unknown, f"unknown field(s) {unknown}; this endpoint takes {sorted(REQUEST_FIELDS)}", unknown[:1])
    for name in ("model", "max_tokens", "messages"):
        expect(name in body, f"{name}: field required")
    expect(isinstance(body["model"], str), "model: must be a string")
    messages = body["messages"]
    expect(isinstance(messages, list) and messages, "messages: must be a non-empty list of messages")
    system = body.get("system")
    if isinstance(system, list):
        expect(all(isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
                   for b in system), "system: a list must hold only text blocks")
        system = "".join(b["text"] for b in system)
    expect(system is None or isinstance(system, str), "system: must be a string or a list of text blocks")
    tools = _tools(body.get("tools"), body.get("tool_choice"), server_tools, max_tools)
    stops = body.get("stop_sequences")
    expect(stops is None or (isinstance(stops, list) and all(isinstance(s, str) and s for s in stops)),
           "stop_sequences: must be a list of non-empty strings")
    thinking = body.get("thinking")
    expect(thinking is None or (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled",
                                                                                       "adaptive")),
           "thinking: must be {'type': 'enabled' | 'disabled' | 'adaptive', ...}")
    expect(body.get("metadata") is None or isinstance(body["metadata"], dict), "metadata: must be an object")
    expect(isinstance(body.get("stream", False), bool), "stream: must be true or false")
    arguments = dict(messages=[_message(m, i) for i, m in enumerate(messages)], system=system, tools=tools,
                     stop_sequences=stops,
                     thinking=None if thinking is None else {"type": "disabled" if thinking["type"] == "disabled"
                                                             else "enabled"},
                     **check_sampling(body, temperature_max=1.0))
    return ChatRequest(body["model"], body["max_tokens"], arguments, body.get("stream", False))


def _tools(tools: Any, choice: Any, server_tools: dict, max_tools: int) -> list:
    if tools is None:
        tools = []
    expect(isinstance(tools, list), "tools: must be a list of tool definitions")
    check_tools_limit(tools, max_tools)
    chosen = "auto" if choice is None else choice.get("type") if isinstance(choice, dict) else None
    expect(chosen in ("auto", "none", "any", "tool"), "tool_choice: must be {'type': 'auto' | 'none' | 'any' | 'tool'}")
    expect(chosen not in ("any", "tool"), "tool_choice: this server lets the model decide ('auto') or offers no "
                                          "tools ('none'); 'any' and 'tool' are not supported", "tool_choice")
    if chosen == "none":
        return []
    result = []
    for i, item in enumerate(tools):
        expect(isinstance(item, dict), f"tools.{i}: must be an object")
        kind = item.get("type", "custom")
        if isinstance(kind, str) and kind.startswith("web_search"):
            expect("web_search" in server_tools, f"tools.{i}: this server has no web_search tool")
            result.append(server_tools["web_search"])
            continue
        expect(kind == "custom", f"tools.{i}.type: {kind!r} is not a tool this server runs; give custom tools "
                                 "(name, description, input_schema) or a web_search tool")
        expect(isinstance(item.get("name"), str) and item["name"], f"tools.{i}.name: must be a non-empty string")
        expect(isinstance(item.get("input_schema"), dict), f"tools.{i}.input_schema: must be a JSON schema object")
        description = item.get("description", "")
        expect(isinstance(description, str), f"tools.{i}.description: must be a string")
        result.append({"name": item["name"], "description": description, "input_schema": item["input_schema"]})
    return result


def _message(message: Any, index: int) -> dict:
    where = f"messages.{index}"
    expect(isinstance(message, dict), f"{where}: must be an object with role and content")
    expect(message.get("role") in ("user", "assistant"), f"{where}.role: must be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        return {"role": message["role"], "content": content}
    expect(isinstance(content, list), f"{where}.content: must be a string or a list of content blocks")
    return {"role": message["role"], "content": [_block(b, f"{where}.content.{j}") for j, b in enumerate(content)]}


def _block(block: Any, where: str) -> dict:
    expect(isinstance(block, dict) and isinstance(block.get("type"), str), f"{where}: must be a content block")
    kind = block["type"]
    expect(kind not in ("image", "document"), f"{where}: this model reads text only; send the content as text")
    if kind == "web_search_tool_result":  # our server tool's result, as the wire names it
        return {"type": "server_tool_result", "tool_use_id": block.get("tool_use_id"),
                "content": _search_text(block.get("content")), "is_error": _search_error(block.get("content"))}
    if kind == "tool_result" and isinstance(block.get("content"), list):
        block = {**block, "content": [{"type": b.get("type"), "text": b.get("text")} if isinstance(b, dict) else b
                                      for b in block["content"]]}
    return {k: v for k, v in block.items() if k not in DROPPED_KEYS}


def _search_text(content: Any) -> str:
    if isinstance(content, list):
        return json.dumps({r.get("title", ""): r.get("encrypted_content", "") for r in content if isinstance(r, dict)},
                          ensure_ascii=False)
    if isinstance(content, dict):
        return str(content.get("message") or content.get("error_code", "error"))
    return str(content)


def _search_error(content: Any) -> bool:
    return isinstance(content, dict) and content.get("type") == "web_search_tool_result_error"


# --- the reply -----------------------------------------------------------------------------------

def content_block(block: dict) -> dict:
    """One reply block as the API writes it."""
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block["thinking"], "signature": ""}
    if kind in ("tool_use", "server_tool_use"):
        arguments = block["input"] if isinstance(block["input"], dict) else {}  # a call cut off by max_tokens
        return {"type": kind, "id": block["id"], "name": block["name"] or "", "input": arguments}
    if kind == "server_tool_result":
        return {"type": "web_search_tool_result", "tool_use_id": block["tool_use_id"],
                "content": _search_results(block)}
    raise ValueError(f"unknown block type {kind!r}")


def _search_results(block: dict) -> Any:
    if block.get("is_error"):
        return {"type": "web_search_tool_result_error", "error_code": "unavailable", "message": block["content"]}
    try:
        hits = json.loads(block["content"])
    except ValueError:
        hits = {"result": block["content"]}
    return [{"type": "web_search_result", "title": title, "url": f"llmkit://docs/{title}",
             "encrypted_content": snippet, "page_age": None} for title, snippet in hits.items()]


def usage_json(usage, cache_write_tokens: int) -> dict:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": cache_write_tokens,
            "server_tool_use": {"web_search_requests": getattr(usage, "server_tool_calls", 0)}}


def message_json(message, model: str, cache_write_tokens: int) -> dict:
    return {"id": message.id, "type": "message", "role": "assistant", "model": model,
            "content": [content_block(b) for b in message.content],
            "stop_reason": STOP_REASONS[message.stop_reason], "stop_sequence": message.stop_sequence,
            "usage": usage_json(message.usage, cache_write_tokens)}


def stream_events(items: Iterator, model: str, message_id: str, prompt_tokens: int,
                  cache_write_tokens) -> Iterator[tuple[str, dict]]:
    """(event name, data) pairs for a streamed reply. Text and thinking stream as written; a tool
    call is sent whole once finished (its name must come first, in content_block_start)."""
    yield "message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 1}}}
    yield "ping", {"type": "ping"}
    opened: list[str] = []  # types of the blocks started so far, by index
    sent: list[int] = []  # characters streamed, by index
    live = True  # blocks stream as written until one that must be sent whole (a tool call)
    for item in items:
        if hasattr(item, "index"):  # a ContentDelta
            if item.index == len(opened) and live and item.type in ("text", "thinking"):
                if opened:
                    yield "content_block_stop", {"type": "content_block_stop", "index": len(opened) - 1}
                opened.append(item.type)
                sent.append(0)
                start = {"type": "text", "text": ""} if item.type == "text" else \
                    {"type": "thinking", "thinking": "", "signature": ""}
                yield "content_block_start", {"type": "content_block_start", "index": item.index,
                                              "content_block": start}
            if item.index == len(opened) - 1 and opened[-1] == item.type:
                sent[-1] += len(item.text)
                yield "content_block_delta", {"type": "content_block_delta", "index": item.index,
                                              "delta": _text_delta(item.type, item.text)}
            elif item.index >= len(opened):
                live = False
            continue
        message = item
        yield from _rest(message, opened, sent)
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": STOP_REASONS[message.stop_reason],
                                          "stop_sequence": message.stop_sequence},
                                "usage": usage_json(message.usage, cache_write_tokens())}
        yield "message_stop", {"type": "message_stop"}


def _text_delta(kind: str, text: str) -> dict:
    return {"type": "text_delta", "text": text} if kind == "text" else {"type": "thinking_delta", "thinking": text}


def _rest(message, opened: list[str], sent: list[int]) -> Iterator[tuple[str, dict]]:
    """Finish the block being streamed, then send the ones not streamed yet, whole."""
    if opened:
        last = len(opened) - 1
        block = message.content[last] if last < len(message.content) else {}
        rest = block.get("text" if opened[-1] == "text" else "thinking", "")[sent[-1]:]
        if rest:
            yield "content_block_delta", {"type": "content_block_delta", "index": last,
                                          "delta": _text_delta(opened[-1], rest)}
        yield "content_block_stop", {"type": "content_block_stop", "index": last}
    for index in range(len(opened), len(message.content)):
        block = content_block(message.content[index])
        empty = dict(block)
        if block["type"] in ("tool_use", "server_tool_use"):
            empty["input"] = {}
        elif block["type"] == "text":
            empty["text"] = ""
        elif block["type"] == "thinking":
            empty["thinking"] = ""
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}
        delta = None
        if block["type"] in ("tool_use", "server_tool_use"):
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        elif block["type"] == "text" and block["text"]:
            delta = {"type": "text_delta", "text": block["text"]}
        elif block["type"] == "thinking" and block["thinking"]:
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        if delta is not None:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
