"""The OpenAI Chat Completions API on top of the chat client.

Chat Completions carries the same conversation in other clothes: the system prompt is a message,
a tool call is ``tool_calls`` on the assistant message (arguments as a JSON *string*), and its
result is a message of role ``tool``. This module translates both ways; the stop reasons map to
``finish_reason`` (end_turn and stop_sequence -> "stop", max_tokens and context_window ->
"length", tool_use -> "tool_calls"), and a stream is ``data: {chunk}`` lines ending ``data: [DONE]``.
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterator

from llmkit.serve.requests import ChatRequest, check_sampling, check_tools_limit, expect

REQUEST_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop",
                  "seed", "n", "stream", "stream_options", "tools", "tool_choice", "user", "metadata",
                  "parallel_tool_calls", "frequency_penalty", "presence_penalty", "store", "reasoning_effort"}
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "context_window": "length",
                  "tool_use": "tool_calls"}
MAX_CHOICES = 8


def parse_request(body: Any, max_tools: int, context_length: int) -> tuple[ChatRequest, int, bool]:
    """Check a /v1/chat/completions body: the chat client's arguments, ``n``, include_usage."""
    expect(isinstance(body, dict), "the request body must be a JSON object")
    unknown = sorted(set(body) - REQUEST_FIELDS)
    expect(not unknown, f"unknown field(s) {unknown}; see the Chat Completions reference", unknown[:1])
    expect(isinstance(body.get("model"), str), "model: field required (a string)", "model")
    messages = body.get("messages")
    expect(isinstance(messages, list) and messages, "messages: must be a non-empty list", "messages")
    for name in ("frequency_penalty", "presence_penalty"):
        expect(body.get(name) in (None, 0, 0.0), f"{name}: not supported by this server (leave it at 0)", name)
    system, converted = _messages(messages)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    expect(stop is None or (isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) and s for s in stop)),
           "stop: must be a string or a list of up to 4 non-empty strings", "stop")
    n = body.get("n", 1)
    expect(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_CHOICES,
           f"n: must be a whole number from 1 to {MAX_CHOICES}", "n")
    options = body.get("stream_options")
    expect(options is None or isinstance(options, dict), "stream_options: must be an object", "stream_options")
    expect(isinstance(body.get("stream", False), bool), "stream: must be true or false", "stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    arguments = dict(messages=converted, system=system, tools=_tools(body.get("tools"), body.get("tool_choice"),
                                                                     max_tools),
                     stop_sequences=stop, **check_sampling(body, temperature_max=2.0))
    request = ChatRequest(body["model"], context_length if max_tokens is None else max_tokens, arguments,
                          body.get("stream", False))
    return request, n, bool((options or {}).get("include_usage"))


def _tools(tools: Any, choice: Any, max_tools: int) -> list[dict]:
    tools = [] if tools is None else tools
    expect(isinstance(tools, list), "tools: must be a list", "tools")
    check_tools_limit(tools, max_tools)
    expect(choice in (None, "auto", "none") or isinstance(choice, (str, dict)), "tool_choice: must be 'auto' or 'none'")
    expect(choice in (None, "auto", "none"), "tool_choice: this server lets the model decide ('auto') or offers no "
                                             "tools ('none'); 'required' and named functions are not supported",
           "tool_choice")
    if choice == "none":
        return []
    result = []
    for i, item in enumerate(tools):
        expect(isinstance(item, dict) and item.get("type") == "function" and isinstance(item.get("function"), dict),
               f"tools[{i}]: must be {{'type': 'function', 'function': {{name, description, parameters}}}}", "tools")
        function = item["function"]
        expect(isinstance(function.get("name"), str) and function["name"], f"tools[{i}].function.name: required",
               "tools")
        schema = function.get("parameters", {"type": "object", "properties": {}})
        expect(isinstance(schema, dict), f"tools[{i}].function.parameters: must be a JSON schema object", "tools")
        description = function.get("description", "")
        expect(isinstance(description, str), f"tools[{i}].function.description: must be a string", "tools")
        result.append({"name": function["name"], "description": description, "input_schema": schema})
    return result


def _messages(messages: list) -> tuple[str | None, list[dict]]:
    """System text, and the conversation as the chat client's user/assistant messages."""
    system, converted = [], []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        expect(isinstance(message, dict), f"{where}: must be an object", "messages")
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content"), where))
        elif role == "user":
            _append(converted, "user", [{"type": "text", "text": _text(message.get("content"), where)}])
        elif role == "assistant":
            _append(converted, "assistant", _assistant_blocks(message, where))
        elif role == "tool":
            expect(isinstance(message.get("tool_call_id"), str), f"{where}.tool_call_id: required", "messages")
            _append(converted, "user", [{"type": "tool_result", "tool_use_id": message["tool_call_id"],
                                         "content": _text(message.get("content"), where)}])
        else:
            expect(False, f"{where}.role: must be system, developer, user, assistant or tool, got {role!r}",
                   "messages")
    return ("\n\n".join(system) if system else None), converted


def _append(messages: list[dict], role: str, blocks: list[dict]) -> None:
    """Consecutive messages of one role become one (a tool result and the next user text share a turn)."""
    if messages and messages[-1]["role"] == role and role == "user":
        messages[-1]["content"] += blocks
    else:
        messages.append({"role": role, "content": blocks})


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    expect(isinstance(content, list), f"{where}.content: must be a string or a list of text parts", "messages")
    for j, part in enumerate(content):
        expect(isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str),
               f"{where}.content[{j}]: this model reads text parts only ({{'type': 'text', 'text': ...}})",
               "messages")
    return "".join(part["text"] for part in content)


def _assistant_blocks(message: dict, where: str) -> list[dict]:
    blocks = []
    if message.get("content"):
        blocks.append({"type": "text", "text": _text(message["content"], where)})
    calls = message.get("tool_calls") or []
    expect(isinstance(calls, list) and len(calls) <= 1,
           f"{where}.tool_calls: this model makes one tool call per turn; send one call per assistant message",
           "messages")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        expect(isinstance(function, dict) and isinstance(function.get("name"), str) and isinstance(call.get("id"), str),
               f"{where}.tool_calls[0]: needs id and function {{name, arguments}}", "messages")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            expect(False, f"{where}.tool_calls[0].function.arguments: must be a JSON object string", "messages")
        expect(isinstance(arguments, dict), f"{where}.tool_calls[0].function.arguments: must encode an object",
               "messages")
        blocks.append({"type": "tool_use", "id": call["id"], "name": function["name"], "input": arguments})
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    return blocks


# --- the reply -----------------------------------------------------------------------------------

def assistant_message(message) -> dict:
    """The reply as a Chat Completions assistant message."""
    text = "".join(b["text"] for b in message.content if b["type"] == "text")
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"] or "",
                           "arguments": json.dumps(b["input"] if isinstance(b["input"], dict) else {},
                                                   ensure_ascii=False)}}
             for b in message.content if b["type"] == "tool_use"]
    thinking = "".join(b["thinking"] for b in message.content if b["type"] == "thinking")
    reply: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        reply["tool_calls"] = calls
    if thinking:
        reply["reasoning_content"] = thinking
    return reply


def usage_json(messages: list) -> dict:
    prompt = sum(m.usage.input_tokens + m.usage.cache_read_input_tokens for m in messages)
    completion = sum(m.usage.output_tokens for m in messages)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(m.usage.cache_read_input_tokens for m in messages)},
            "completion_tokens_details": {"reasoning_tokens": sum(m.usage.thinking_tokens for m in messages)}}


def completion_json(completion_id: str, model: str, messages: list) -> dict:
    return {"id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": i, "message": assistant_message(m), "logprobs": None,
                         "finish_reason": FINISH_REASONS[m.stop_reason]} for i, m in enumerate(messages)],
            "usage": usage_json(messages)}


def chunk(completion_id: str, model: str, choices: list, usage: dict | None = None) -> dict:
    body = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return body


def stream_chunks(items: Iterator, index: int, completion_id: str, model: str, replies: list) -> Iterator[dict]:
    """The chunks of one choice: the role, text as written, the tool call whole, the finish reason.
    The finished ``Message`` is appended to ``replies`` (for the usage chunk)."""
    yield chunk(completion_id, model, [{"index": index, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None, "logprobs": None}])
    for item in items:
        if hasattr(item, "index"):
            if item.type == "text" and item.text:
                yield chunk(completion_id, model, [{"index": index, "delta": {"content": item.text},
                                                    "finish_reason": None, "logprobs": None}])
            continue
        reply = assistant_message(item)
        for position, call in enumerate(reply.get("tool_calls", [])):
            yield chunk(completion_id, model, [{"index": index, "delta": {"tool_calls": [{**call, "index": position}]},
                                                "finish_reason": None, "logprobs": None}])
        yield chunk(completion_id, model, [{"index": index, "delta": {}, "logprobs": None,
                                            "finish_reason": FINISH_REASONS[item.stop_reason]}])
        replies.append(item)
