"""From generated tokens to the reply: content blocks, the pieces streamed so far, usage and the
trace's events.

The model writes one row of tokens per generation ("round"; a request in which the client ran a
server tool has one more round per call). ``llmkit.chat.parse.parse_assistant`` reads them as
blocks; this module cuts a matched stop sequence out, streams only text that can no longer change,
adds every round up into one ``Usage``, and records each round in a ``Trace``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterator

from llmkit.chat.message import ContentDelta
from llmkit.chat.server_tools import MAX_SERVER_CALLS
from llmkit.chat.parse import parse_assistant
from llmkit.chat.trace import Trace
from llmkit.generation.generate import Usage


@dataclass
class Round:
    """One generation inside a request: a request with server tool calls has one more per call."""

    generation: Any  # llmkit.generation.generate.Generation
    tokens: list[int]
    started: float  # trace time when it began (0.0 without a trace)


def block_text(block: dict) -> str | None:
    if block["type"] == "text":
        return block["text"]
    if block["type"] == "thinking":
        return block["thinking"]
    if block["type"] == "server_tool_result":
        return block["content"]
    return block["input"] if isinstance(block["input"], str) else None  # a tool call still being written


def deltas(blocks: list[dict], sent: list[int], holdback: int, *, final: bool = False) -> Iterator[ContentDelta]:
    """The text in ``blocks`` not streamed yet, keeping back the last ``holdback`` characters of the
    newest block (they may be the start of a stop sequence) and any half-decoded character."""
    for index, block in enumerate(blocks):
        if index == len(sent):
            sent.append(0)
        text = block_text(block)
        if text is None:
            continue
        is_open = index == len(blocks) - 1 and not final
        end = len(text) - (holdback if is_open and block["type"] != "tool_use" else 0)
        while is_open and end > 0 and text[end - 1] == "\ufffd":
            end -= 1
        if end > sent[index]:
            yield ContentDelta(index, block["type"], text[sent[index]:end])
            sent[index] = end


def final_content(generation, tokens: list[int], tokenizer, tool_use_id: str) -> list[dict]:
    """The reply's blocks; a matched stop sequence is cut out of the block it ended."""
    blocks = parse_assistant(tokenizer, tokens, tool_use_id=tool_use_id)
    if generation.stop_reason == "stop_sequence" and blocks and blocks[-1]["type"] in ("text", "thinking"):
        key = "text" if blocks[-1]["type"] == "text" else "thinking"
        text = blocks[-1][key]
        at = text.rfind(generation.stop_sequence)
        if at >= 0:
            blocks[-1][key] = text[:at]
            if key == "text" and not blocks[-1]["text"]:
                blocks.pop()
    return blocks


def thinking_token_count(tokens: list[int], tokenizer) -> int:
    """Tokens from ``<|thinking|>`` to ``<|end_thinking|>`` (markers included)."""
    special = tokenizer.special_tokens
    start, end = special["<|thinking|>"], special["<|end_thinking|>"]
    count, inside = 0, False
    for token in tokens:
        inside = inside or token == start
        count += inside
        if token == end:
            inside = False
    return count


def record_round(trace: Trace, round: Round, blocks: list[dict], tokenizer) -> None:
    """One generation's events: its prefill, thinking and decode ("answer"; a round that ended in a
    server tool call has stop reason "tool_use", and the client's run of the tool follows it)."""
    usage, started = round.generation.usage, round.started
    first = usage.time_to_first_token or 0.0
    trace.add("prefill", t=started, duration=first, input_tokens=usage.input_tokens,
              cache_read_input_tokens=usage.cache_read_input_tokens)
    thinking = thinking_token_count(round.tokens, tokenizer)
    if thinking:
        trace.add("thinking", t=started + first, tokens=thinking)
    text = "".join(block["text"] for block in blocks if block["type"] == "text")
    trace.add("answer", t=started + first, duration=max(trace.now() - started - first, 0.0),
              stop_reason=round.generation.stop_reason, text=text, content=copy.deepcopy(blocks),
              output_tokens=usage.output_tokens, tokens=list(round.tokens))


def message_usage(rounds: list[Round], content: list[dict], tokenizer) -> Usage:
    """The request's usage: every round's prefilled and cached input tokens and its output tokens.

    After a server tool call the model reads its context again, now with the call and the result
    in it, so a request with one server call prefills (or reads from the cache) two prompts; a
    hosted API bills each of those sampling rounds the same way."""
    usages = [r.generation.usage for r in rounds]
    return Usage(
        input_tokens=sum(u.input_tokens for u in usages), output_tokens=sum(u.output_tokens for u in usages),
        cache_read_input_tokens=sum(u.cache_read_input_tokens for u in usages),
        thinking_tokens=sum(thinking_token_count(r.tokens, tokenizer) for r in rounds),
        time_to_first_token=usages[0].time_to_first_token,
        server_tool_calls=min(sum(block["type"] == "server_tool_use" for block in content), MAX_SERVER_CALLS))
