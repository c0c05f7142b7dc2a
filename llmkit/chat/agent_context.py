"""Making room in an agent's context when the next request does not fit the model's window.

An agent loop grows its conversation by a call and a result every step, so it meets the context
window sooner or later. The oldest tool exchanges are the cheapest thing to forget (the model has
already used what they said), so they go first, a call together with its result; the newest
exchange always stays. If that is not enough, the longest tool result is cut, and the model is told
so in the result itself, so a cut is never silent. The caller keeps the full transcript.
"""
from __future__ import annotations

import math
import re
from typing import Callable

NOTE_TOKENS = 40  # room left for the note that says a result was cut
CUT_NOTE = "\n[cut by the harness: the first {shown} of {total} characters are shown; the whole result did not fit " \
           "the context window]"
_CUT = re.compile(r"\n\[cut by the harness: the first (\d+) of (\d+) characters are shown; [^\]]*\]\Z")


def make_room(context: list[dict], over_by: int, count_tokens: Callable[[str], int] | None) -> str | None:
    """Shrink ``context`` in place by one step; a sentence saying what was done, or None if nothing
    more can go (only the newest exchange is left and its results are already cut to nothing)."""
    return drop_oldest_exchange(context) or cut_longest_result(context, over_by, count_tokens)


def tool_exchanges(context: list[dict]) -> list[int]:
    """Indices ``i`` where ``context[i]`` is an assistant message ending in a tool call and
    ``context[i + 1]`` a user message holding only its tool results: a pair that can go together."""
    found = []
    for i, (message, after) in enumerate(zip(context, context[1:])):
        calls = message["role"] == "assistant" and isinstance(message["content"], list) and message["content"] \
            and message["content"][-1].get("type") == "tool_use"
        answers = after["role"] == "user" and isinstance(after["content"], list) and after["content"] \
            and all(block.get("type") == "tool_result" for block in after["content"])
        if calls and answers:
            found.append(i)
    return found


def drop_oldest_exchange(context: list[dict]) -> str | None:
    """Drop the oldest tool call and its results, unless it is the newest (or only) exchange."""
    exchanges = tool_exchanges(context)
    if len(exchanges) < 2:
        return None
    start = exchanges[0]
    name = context[start]["content"][-1].get("name") or "a malformed call"
    del context[start:start + 2]
    return f"dropped the oldest tool exchange (a call to {name} and its result) to fit the context window"


def cut_longest_result(context: list[dict], over_by: int, count_tokens: Callable[[str], int] | None) -> str | None:
    """Cut the longest tool result by about ``over_by`` tokens (plus room for the note), keeping its
    beginning and saying at its end how much is shown."""
    results = [block for message in context if message["role"] == "user" and isinstance(message["content"], list)
               for block in message["content"] if block.get("type") == "tool_result"]
    shown_of = {id(block): _shown_and_total(block) for block in results}
    longest = max(results, key=lambda block: len(shown_of[id(block)][0]), default=None)
    if longest is None or not shown_of[id(longest)][0]:
        return None
    shown, total = shown_of[id(longest)]
    tokens = count_tokens(shown) if callable(count_tokens) else None
    chars_per_token = len(shown) / tokens if tokens else 4.0
    keep = max(0, len(shown) - math.ceil((over_by + NOTE_TOKENS) * chars_per_token))
    cut = shown[:keep] + CUT_NOTE.format(shown=keep, total=total)
    size = count_tokens if callable(count_tokens) else len
    if size(cut) >= size(_text(longest)):
        return None  # the note would cost more than it saves: a short result is worth keeping whole
    longest["content"] = cut
    return f"cut the tool result {longest.get('tool_use_id')!r} to its first {keep} of {total} characters"


def _shown_and_total(block: dict) -> tuple[str, int]:
    """The part of a result still shown (its note taken off, if it was cut before) and its full length."""
    content = _text(block)
    cut = _CUT.search(content)
    if cut is None:
        return content, len(content)
    return content[:cut.start()], int(cut.group(2))


def _text(block: dict) -> str:
    """A tool result's content as one string (a list of text blocks joined)."""
    content = block.get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""
