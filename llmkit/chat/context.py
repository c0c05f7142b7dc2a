"""The context policy: what a client does when a conversation no longer fits the window.

Every request re-sends the whole conversation, so a long chat eventually outgrows the model's
context window. The prompt must leave room for at least one new token. With the "error" policy a
prompt that does not fit is a ``ContextWindowError`` saying by how many tokens; with
"drop_oldest" the oldest whole turns are dropped until it fits. A turn starts at a user message
that is not a tool result, so the system prompt and tools always stay, and a tool call is never
kept without its result (or a result without its call): either would break the conversation.
"""
from __future__ import annotations

from typing import Callable

from llmkit.chat.message import ContextWindowError
from llmkit.chat.template import Rendered

CONTEXT_POLICIES = ("error", "drop_oldest")


def check_context_policy(policy: str) -> str:
    if policy not in CONTEXT_POLICIES:
        raise ValueError(f"context_policy must be one of {CONTEXT_POLICIES}, got {policy!r}")
    return policy


def fit_context(render: Callable[[list[dict]], Rendered], messages: list[dict], context_window: int,
                policy: str) -> tuple[list[dict], list[dict], Rendered]:
    """``(kept, dropped, rendered)``: the messages that fit ``context_window`` under ``policy``,
    the ones left out (oldest first), and the kept messages rendered by ``render``."""
    rendered, dropped = render(messages), []
    limit = context_window - 1  # at least one new token must fit
    if len(rendered) > limit and policy == "drop_oldest":
        cut = _fewest_turns_to_drop(messages, rendered, limit)  # one render, not one per dropped turn
        if cut is not None:
            dropped, messages = messages[:cut], messages[cut:]
            rendered = render(messages)
    while len(rendered) > limit:
        cut = next_turn_start(messages)
        if policy == "error" or cut is None:
            hint = ("pass context_policy='drop_oldest' to drop the oldest turns, or shorten the messages"
                    if cut is not None else "even the newest turn alone is too long; shorten it, the system "
                    "prompt or the tools")
            raise ContextWindowError(
                f"the prompt is {len(rendered)} tokens but the context window is {context_window} and one "
                f"token must be left for the reply: over by {len(rendered) - limit} tokens; {hint}",
                prompt_tokens=len(rendered), context_window=context_window)
        dropped += messages[:cut]
        messages = messages[cut:]
        rendered = render(messages)
    return messages, dropped, rendered


def _fewest_turns_to_drop(messages: list[dict], rendered: Rendered, limit: int) -> int | None:
    """The first turn start ``cut`` such that ``messages[cut:]`` fits in ``limit`` tokens, or the
    newest turn's start if none does (None if there is only one turn). Each message renders on its
    own, so its share of the row is known from ``rendered.message_starts`` without rendering again."""
    starts = rendered.message_starts
    if len(starts) != len(messages):
        return None  # a renderer that does not record where messages start: drop turn by turn
    cut = None
    for index in _turn_starts(messages):
        cut = index
        if len(rendered) - (starts[index] - starts[0]) <= limit:
            break
    return cut


def _turn_starts(messages: list[dict]):
    """Every index where a turn starts (a user message that is not a tool result), after the first."""
    for index in range(1, len(messages)):
        message = messages[index]
        is_result = isinstance(message["content"], list) and any(
            block.get("type") == "tool_result" for block in message["content"])
        if message["role"] == "user" and not is_result:
            yield index


def next_turn_start(messages: list[dict]) -> int | None:
    """Where the second turn starts: the next user message that is not a tool result. None if the
    newest turn is the only one."""
    return next(_turn_starts(messages), None)


def context_parts(rendered: Rendered, history_tokens: int, dropped: int) -> dict:
    """Tokens per part of the prompt (system, tools, history, new message), as the trace records them."""
    roles = rendered.roles
    system, tools = roles.count("system"), roles.count("tools")
    history = history_tokens - system - tools
    return dict(total=len(roles), system=system, tools=tools, history=history,
                new_message=len(roles) - system - tools - history, dropped_messages=dropped)
