"""The chat template: a conversation in the Messages-API shape -> one row of token ids + a loss mask.

A chat model reads one flat sequence of tokens. Roles, thinking, tool calls and tool results are
not a data structure inside the model: they are *control tokens* (the course tokenizer reserves
them, see DEVELOPERS.md) placed between ordinary text. This module fixes where they go::

    <|system|>You are a helpful assistant.
    <|tools|>get_weather(city: string, day: "today"|"tomorrow" = "today"): Get the weather forecast ...
    <|user|>Will it rain in Pune tomorrow? Should I take an umbrella?
    <|assistant|>[<|thinking|>Tomorrow's weather isn't in my training data.<|end_thinking|>
        <|tool_call|>{"name": "get_weather", "input": {"city": "Pune", "day": "tomorrow"}}<|end_tool_call|>]
    <|tool_result|>{"city": "Pune", "day": "tomorrow", "condition": "sunny", ...}<|end_tool_result|>
    <|assistant|>[No umbrella needed: 31% chance of rain.<|end_turn|>]

(The line breaks are only for reading; the template adds none. ``[...]`` is the loss mask: the
tokens the assistant wrote, which is what fine-tuning trains on.)

The rules, in order:

- The system prompt, then the tool definitions, one line per tool (``tool_line``), come first and
  never change during a conversation, so a prefix cache can keep them.
- Every message starts with its role token. An assistant turn ends with ``<|end_turn|>`` when it
  answers (generation stops there: stop reason "end_turn") or with the ``<|end_tool_call|>`` of
  its tool call (stop reason "tool_use"). So a tool call is the last block of its message.
- A tool call is the JSON ``{"name": ..., "input": {...}}`` between ``<|tool_call|>`` and
  ``<|end_tool_call|>``; a tool result comes back as its content between ``<|tool_result|>`` and
  ``<|end_tool_result|>`` (an error result's content starts with ``Error: ``). After the result
  the assistant continues in a *new* message with its own ``<|assistant|>`` header, exactly as
  the Messages API stores it (the result travels in a user message, the reply is a new message).
- A *server tool* (``llmkit.chat.tools.Tool.server``, e.g. ``web_search``) is run by the client inside
  the request, so its call and result stay in the assistant's message, as ``server_tool_use`` and
  ``server_tool_result`` blocks. They render as exactly the tokens of a tool call, its result and
  a new ``<|assistant|>`` header: the model (and the prefix cache, and training) sees one format
  whoever runs the tool. The result and the header are given, not trained on.
- Tool-use ids are not rendered: results follow their calls in order, and the model never has to
  copy an id. ``parse_assistant`` hands out fresh ids. They are still checked: each call has a
  distinct id, and is answered exactly once, by a ``tool_result`` before the next assistant turn.
- A tool's name is letters, digits, ``_`` and ``-`` (as hosted APIs require), so no name can break
  its line of the tools block and write a second tool.
- Only the template writes control tokens. Every piece of text (user, system, tool definitions,
  tool results, even earlier assistant text) is encoded with ``disallowed_special=()``, so the
  literal text ``<|end_turn|>`` inside a message stays ordinary text and can't fake a turn.
- Each piece is encoded on its own and the ids are joined, so the ids of a prompt are always a
  prefix of the ids of the same prompt plus its answer (what training and caching rely on).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from llmkit.chat.markers import marker_ids
from llmkit.chat.tool_signature import check_tool, signature, summary, tool_definitions
from llmkit.checks import check_bool

ROLES = ("user", "assistant")
BLOCK_TYPES = {"user": ("text", "tool_result"),
               "assistant": ("text", "thinking", "tool_use", "server_tool_use", "server_tool_result")}
ERROR_PREFIX = "Error: "


@dataclass(frozen=True)
class Rendered:
    """One rendered conversation: ``ids`` and, for each id, ``mask`` (True where the assistant wrote
    it, so the loss counts it) and ``roles`` (which part it came from: "system", "tools", "user",
    "tool_result" or "assistant"). ``message_starts[i]`` is where message ``i`` begins in ``ids``:
    each message is rendered on its own, so leaving out the first ``k`` messages shortens the row by
    exactly ``message_starts[k] - message_starts[0]`` ids (what a context policy needs to know)."""

    ids: list[int]
    mask: list[bool]
    roles: list[str]
    message_starts: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.ids)

    def masked_ids(self) -> list[int]:
        """The ids the loss is computed on, in order."""
        return [token for token, trained in zip(self.ids, self.mask) if trained]

    def assistant_spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each run of trained ids, so ``ids[start:end]`` is one stretch the
        assistant wrote (a thinking block plus tool call, or an answer with its ``<|end_turn|>``).

        Each run begins after an ``<|assistant|>`` header, which the model is given, not trained on;
        decoding the runs one by one is how to check what fine-tuning will teach.
        """
        spans, start = [], None
        for position, trained in enumerate(self.mask):
            if trained and start is None:
                start = position
            elif not trained and start is not None:
                spans.append((start, position))
                start = None
        if start is not None:
            spans.append((start, len(self.mask)))
        return spans


class StopTokens(NamedTuple):
    """Ids that end an assistant turn: pass ``end_turn`` as ``stop_tokens`` and ``tool_use`` as
    ``tool_stop_tokens`` to ``llmkit.generation.generate``. ``<|endoftext|>`` also ends a turn: it is what a
    base model writes when a document ends."""

    end_turn: tuple[int, ...]
    tool_use: tuple[int, ...]


def stop_tokens(tokenizer) -> StopTokens:
    """The ids that end generation of an assistant turn, grouped by stop reason."""
    ids = marker_ids(tokenizer)
    return StopTokens(end_turn=(ids["end_turn"], ids["endoftext"]), tool_use=(ids["end_tool_call"],))


# ---------------------------------------------------------------------------------------------- tools
def tool_line(definition: dict) -> str:
    """How the model sees one tool: ``name(signature): summary`` on one line.

    The signature is the tool's JSON schema written compactly: each parameter with its type,
    ``"a"|"b"`` for an enum, ``= default`` or ``?`` when it may be left out. A schema with anything this
    notation can't say (nested objects, numeric limits, ...) is written as compact JSON instead.
    The summary is the description's first sentence. Parameter descriptions and the rest of the
    description are left out on purpose: a small model's window is short (the first course model
    read 256 tokens; today's reads 1,024), and several tools, a long result and the history must
    fit beside each other. The model learns the tools from this form, so it stays the same.
    """
    definition = check_tool(definition, "tool")
    return f"{definition['name']}({signature(definition['input_schema'])}): {summary(definition['description'])}"



# ---------------------------------------------------------------------------------------------- render
class _Row:
    """Token ids being built, with their mask and role labels."""

    def __init__(self, tokenizer):
        self.tokenizer, self.markers = tokenizer, marker_ids(tokenizer)
        self.ids: list[int] = []
        self.mask: list[bool] = []
        self.roles: list[str] = []

    def marker(self, name: str, role: str, trained: bool) -> None:
        self._add([self.markers[name]], role, trained)

    def text(self, text: str, role: str, trained: bool) -> None:
        self._add(self.tokenizer.encode(text, disallowed_special=()), role, trained)  # markers stay text

    def _add(self, ids: list[int], role: str, trained: bool) -> None:
        self.ids += ids
        self.mask += [trained] * len(ids)
        self.roles += [role] * len(ids)


def render(tokenizer, messages: list[dict], *, tools=None, system: str | None = None,
           add_generation_prompt: bool = True) -> Rendered:
    """Render a conversation as ids plus a loss mask (see the module docstring for the layout).

    ``messages`` are ``{"role": "user" | "assistant", "content": str | [blocks]}``; ``tools`` are
    ``llmkit.chat.tools.Tool`` objects or their definitions. With ``add_generation_prompt`` the row
    ends with ``<|assistant|>`` so the model writes the next turn; if the last message is the
    assistant's, it is left open instead (a *prefill* the model continues). For training, pass
    ``add_generation_prompt=False``: every assistant message is closed.
    """
    if system is not None and not isinstance(system, str):
        raise TypeError(f"system must be a str or None, got {type(system).__name__}")
    if not isinstance(messages, list):
        raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}")
    definitions = tool_definitions(tools)
    row = _Row(tokenizer)
    if system:
        row.marker("system", "system", False)
        row.text(system, "system", False)
    if definitions:
        row.marker("tools", "tools", False)
        row.text("\n".join(tool_line(d) for d in definitions), "tools", False)

    calls, starts = _ToolCalls(), []
    for index, message in enumerate(messages):
        starts.append(len(row.ids))
        role, blocks = _check_message(message, index)
        is_last = index == len(messages) - 1
        if role == "user":
            _render_user(row, blocks, index, calls)
        else:
            calls.check_answered(f"messages[{index}]")
            prefill = is_last and add_generation_prompt
            _render_assistant(row, blocks, index, calls, close=not prefill)
    if add_generation_prompt and (not messages or messages[-1]["role"] == "user"):
        calls.check_answered("the next assistant turn")
        row.marker("assistant", "assistant", False)
    return Rendered(row.ids, row.mask, row.roles, tuple(starts))


class _ToolCalls:
    """The tool_use ids seen so far, to check that each call is answered exactly once, in time."""

    def __init__(self):
        self.pending: dict[str, str] = {}  # id -> where the call is, still waiting for its result
        self.answered: set[str] = set()

    def called(self, tool_use_id: str, where: str) -> None:
        if tool_use_id in self.pending or tool_use_id in self.answered:
            raise ValueError(f"{where}['id'] is {tool_use_id!r}, the id of an earlier tool_use; give each call its "
                             f"own id, so each result answers exactly one call")
        self.pending[tool_use_id] = where

    def result(self, tool_use_id: str, where: str) -> None:
        if tool_use_id in self.answered:
            raise ValueError(f"{where}['tool_use_id'] is {tool_use_id!r}, a call that already has its tool_result; "
                             f"send one result per call")
        if tool_use_id not in self.pending:
            raise ValueError(f"{where}['tool_use_id'] is {tool_use_id!r}, which matches no earlier tool_use block; "
                             f"a tool_result answers the id of a tool_use the assistant wrote before it")
        del self.pending[tool_use_id]
        self.answered.add(tool_use_id)

    def check_answered(self, before: str) -> None:
        if self.pending:
            tool_use_id, where = next(iter(self.pending.items()))
            raise ValueError(f"the tool_use {tool_use_id!r} at {where} has no tool_result before {before}; send "
                             f"its result (tool_result block, is_error=True if it could not run) in a user message")


def _check_message(message: Any, index: int) -> tuple[str, list[dict]]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise TypeError(f"{where} must be a dict with 'role' and 'content', got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(
            f"{where}['role'] is {role!r}; it must be 'user' or 'assistant' (pass the system prompt as "
            f"system=..., and send tool results as tool_result blocks in a user message)"
        )
    if "content" not in message:
        raise ValueError(f"{where} has no 'content'; give a str or a list of content blocks")
    content = message["content"]
    if isinstance(content, str):
        return role, [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TypeError(f"{where}['content'] must be a str or a list of content blocks, got {type(content).__name__}")
    if role == "user" and not content:
        raise ValueError(f"{where}['content'] is an empty list, so the message has no place in the conversation; "
                         f"give it a text or tool_result block, or leave the message out")
    for j, block in enumerate(content):
        block_where = f"{where}['content'][{j}]"
        if not isinstance(block, dict):
            raise TypeError(f"{block_where} must be a dict with a 'type', got {type(block).__name__}")
        if block.get("type") not in BLOCK_TYPES[role]:
            raise ValueError(f"{block_where}['type'] is {block.get('type')!r}; a {role} message may hold "
                             f"blocks of type {', '.join(BLOCK_TYPES[role])}")
        if role == "assistant" and j < len(content) - 1 and block["type"] == "tool_use":
            raise ValueError(f"{block_where} is a tool_use but is not the last block; generation stops at "
                             f"<|end_tool_call|>, so a tool call ends its assistant message (one call per turn)")
        if role == "assistant":
            _check_server_pair(content, j, block_where)
    return role, content


def server_result_ids(tokenizer, result: dict) -> list[int]:
    """The ids a client appends after the model's server tool call before it lets the model go on:
    the ``server_tool_result`` block's content between the result markers, then a fresh
    ``<|assistant|>`` header. The same ids ``render`` writes for that block in the history."""
    row = _Row(tokenizer)
    _render_result(row, result, "result")
    row.marker("assistant", "assistant", False)
    return row.ids


def _check_server_pair(content: list[dict], j: int, where: str) -> None:
    """A server_tool_use is followed at once by its server_tool_result (the client ran it in between),
    and a server_tool_result follows the server_tool_use whose id it answers."""
    block = content[j]
    if block["type"] == "server_tool_use":
        after = content[j + 1] if j + 1 < len(content) else None
        if after is None or after.get("type") != "server_tool_result":
            raise ValueError(f"{where} is a server_tool_use without a server_tool_result right after it; the "
                             f"client runs a server tool inside the request, so its result follows in the same message")
        _field(block, "id", str, where)
    elif block["type"] == "server_tool_result":
        before = content[j - 1] if j > 0 else None
        if before is None or before.get("type") != "server_tool_use":
            raise ValueError(f"{where} is a server_tool_result that does not follow a server_tool_use; "
                             f"keep the call and its result next to each other, in order")
        if _field(block, "tool_use_id", str, where) != before.get("id"):
            raise ValueError(f"{where}['tool_use_id'] is {block['tool_use_id']!r} but the server_tool_use before it "
                             f"has id {before.get('id')!r}; a result answers the call right before it")


def _field(block: dict, key: str, kind: type, where: str):
    value = block.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise TypeError(f"{where}['{key}'] must be a {kind.__name__}, got {value!r}")
    return value


def _render_user(row: _Row, blocks: list[dict], index: int, calls: _ToolCalls) -> None:
    in_text = False
    for j, block in enumerate(blocks):
        where = f"messages[{index}]['content'][{j}]"
        if block["type"] == "text":
            if not in_text:
                row.marker("user", "user", False)
            row.text(_field(block, "text", str, where), "user", False)
            in_text = True
            continue
        calls.result(_field(block, "tool_use_id", str, where), where)
        _render_result(row, block, where)
        in_text = False


def _render_result(row: _Row, block: dict, where: str) -> None:
    """``<|tool_result|>content<|end_tool_result|>`` for a tool_result or server_tool_result block."""
    is_error = check_bool(f"{where}['is_error']", block.get("is_error", False))
    row.marker("tool_result", "tool_result", False)
    content = _result_text(block.get("content", ""), where)
    row.text((ERROR_PREFIX if is_error else "") + content, "tool_result", False)
    row.marker("end_tool_result", "tool_result", False)


def _result_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                         and isinstance(b.get("text"), str) for b in content):
        return "".join(b["text"] for b in content)
    raise TypeError(f"{where}['content'] must be a str or a list of text blocks, got {content!r}")


def _render_assistant(row: _Row, blocks: list[dict], index: int, calls: _ToolCalls, *, close: bool) -> None:
    row.marker("assistant", "assistant", False)  # the header is given, not written by the model
    for j, block in enumerate(blocks):
        where = f"messages[{index}]['content'][{j}]"
        if block["type"] == "text":
            row.text(_field(block, "text", str, where), "assistant", True)
        elif block["type"] == "thinking":
            row.marker("thinking", "assistant", True)
            row.text(_field(block, "thinking", str, where), "assistant", True)
            row.marker("end_thinking", "assistant", True)
        elif block["type"] == "server_tool_use":  # written by the model, like any tool call
            row.marker("tool_call", "assistant", True)
            row.text(_tool_call_text(block, where), "assistant", True)
            row.marker("end_tool_call", "assistant", True)
        elif block["type"] == "server_tool_result":  # given: the result, then a fresh header to go on from
            _render_result(row, block, where)
            row.marker("assistant", "assistant", False)
        else:
            calls.called(_field(block, "id", str, where), where)
            row.marker("tool_call", "assistant", True)
            row.text(_tool_call_text(block, where), "assistant", True)
            row.marker("end_tool_call", "assistant", True)
    if not blocks or blocks[-1]["type"] != "tool_use":
        if close:
            row.marker("end_turn", "assistant", True)
    elif not close:
        raise ValueError(f"messages[{index}] ends with a tool call; add the user message with its tool_result "
                         f"before asking for the next assistant turn")


def _tool_call_text(block: dict, where: str) -> str:
    """The JSON the model writes for a call; a malformed call (``input`` a str) is shown as it was written."""
    tool_input = block.get("input")
    if isinstance(tool_input, str):
        return tool_input
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}['name'] is missing or empty; a tool_use block names the tool it calls")
    if not isinstance(tool_input, dict):
        raise TypeError(f"{where}['input'] must be a dict of arguments, got {tool_input!r}")
    return json.dumps({"name": name, "input": tool_input}, ensure_ascii=False)
