"""What the skill data thinks before choosing a tool, and where its lookups sit among the tokens.

Before each call the skill data thinks the words the request shares with the tool's line
(``call_note``: "tide level"), and the call then names the tool. Naming it is the one step that
looks *back* in the tool list (a line starts with the name, so the words come after it): a small
model often knows which line it wants and still misspells how the name begins. So the client
chooses the name whole, by the model's probability of each offered name
(``llmkit.chat.constrained``), and the data does not make the model spell it out in the thinking
first, where a wrong guess would lead the call astray.

The ``which`` kind asks which tool answers each of several things, and its thinking does write
``"<words> -> <name>"`` (``lookup_note``) for each. These helpers find those name tokens, to give
them more weight in the loss (``lookup_weights``).
"""
from __future__ import annotations

from llmkit.chat.template import tool_line
from llmkit.chat.tools import Tool

LOOKUP_ARROW = " -> "


def call_note(tool: Tool, key: str) -> str:
    """The thinking before a call: the words the request shares with the chosen tool's line (for the
    course's own tools, the word of their line that says what they do), e.g. "tide level".

    Written first, they point at the line that holds them, so the call that follows can name the
    tool on that line: data/experiments/tool_lookup measured, on a toy model, held-out tools named
    right 1 time in 100 without this step and 71 times with it.
    """
    _check_key(tool, key)
    return key


def _check_key(tool: Tool, key: str) -> None:
    if key.lower() not in tool_line(tool.definition()).lower():
        raise ValueError(f"{key!r} is not in {tool.name}'s tool line: the thinking quotes words the line has")


def lookup_note(tool: Tool, key: str) -> str:
    """One line of the ``which`` kind's thinking: the words the request shares with a tool's line,
    then its name, e.g. "tide level -> get_tide_level" (the reply then names the tools)."""
    _check_key(tool, key)
    return f"{key}{LOOKUP_ARROW}{tool.name}"


def thinking_notes(messages: list[dict]) -> list[str]:
    """The text of every thinking block in the assistant's messages, in order."""
    return [block["thinking"] for message in messages if message["role"] == "assistant"
            and isinstance(message["content"], list) for block in message["content"] if block["type"] == "thinking"]


def token_positions(tokenizer, ids: list[int], marker_at: int, start: int, end: int) -> list[int]:
    """Positions of the tokens after the marker at ``marker_at`` (``<|tool_call|>``, ``<|thinking|>``)
    that cover bytes ``start:end`` of the text written after it."""
    positions, offset = [], 0
    for position in range(marker_at + 1, len(ids)):
        piece = tokenizer.token_bytes(ids[position])
        if offset < end and offset + len(piece) > start:
            positions.append(position)
        offset += len(piece)
        if offset >= end:
            return positions
    raise ValueError(f"the rendered text after position {marker_at} is shorter than byte {end}")


def lookup_name_positions(tokenizer, ids: list[int], messages: list[dict]) -> list[int]:
    """Positions in ``ids`` (the rendered ``messages``) of every name a lookup note writes after its arrow."""
    markers = [i for i, token in enumerate(ids) if token == tokenizer.special_tokens["<|thinking|>"]]
    notes = thinking_notes(messages)
    if len(markers) != len(notes):
        raise ValueError(f"{len(notes)} thinking blocks but {len(markers)} <|thinking|> markers in the rendered row")
    positions = []
    for marker, note in zip(markers, notes):
        line_start = 0
        for line in note.split("\n"):  # one lookup per line (the ``which`` kind writes several)
            if LOOKUP_ARROW in line:
                start = line_start + len(line.rsplit(LOOKUP_ARROW, 1)[0].encode("utf-8")) + len(LOOKUP_ARROW)
                positions += token_positions(tokenizer, ids, marker, start, line_start + len(line.encode("utf-8")))
            line_start += len(line.encode("utf-8")) + 1
    return positions


def lookup_weights(tokenizer, ids: list[int], mask: list[bool], messages: list[dict], weight: float) -> list[float]:
    """The loss mask as weights, ``weight`` on the lookups' name tokens and 1 on every other trained token.

    Weighting a few tokens is how a fine-tune puts more of its gradient on one step without
    writing more conversations. Only the ``which`` kind writes such names now (a call's thinking
    does not), and 5x on them did not help when every call had one (recipe README).
    """
    if weight <= 0:
        raise ValueError(f"lookup weight must be positive, got {weight!r}")
    weights = [float(trained) for trained in mask]
    for position in lookup_name_positions(tokenizer, ids, messages):
        if not mask[position]:
            raise ValueError(f"lookup name token at {position} is not one the assistant wrote")
        weights[position] = weight
    return weights
