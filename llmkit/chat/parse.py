"""Reading a generated turn back: the tokens a model wrote after ``<|assistant|>`` -> content blocks.

The inverse of the assistant part of ``llmkit.chat.template.render``: control tokens become the
boundaries of thinking, text and tool_use blocks, and a tool call's JSON becomes its name and input.
A model can write anything, so nothing here assumes the turn is well formed: a broken call still
becomes a block, with an ``error`` that the harness sends back to the model.
"""
from __future__ import annotations

import json

from llmkit.chat.markers import marker_ids


def parse_assistant(tokenizer, ids, *, tool_use_id: str = "toolu_0") -> list[dict]:
    """Turn the tokens a model generated after ``<|assistant|>`` back into content blocks.

    Thinking, text and a tool call come back as ``thinking``, ``text`` and ``tool_use`` blocks. The
    turn ends at a stop token (``llmkit.chat.template.stop_tokens``); tokens after it are an error, so parse one turn at
    a time. Output cut off early (max_tokens) keeps what was written. Generation stops at the end
    of a tool call, so a turn holds at most one: it gets ``tool_use_id`` (a harness passes a fresh
    id each turn).

    A malformed call (not JSON, not ``{"name": str, "input": {...}}``, or cut off) still becomes a
    ``tool_use`` block, so the conversation keeps its shape: ``input`` holds the raw text the model
    wrote (rendered back verbatim) and ``error`` says what is wrong. The harness answers it with
    ``tool_result(block["id"], block["error"], is_error=True)`` so the model can try again.
    """
    markers = marker_ids(tokenizer)
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    stops = {markers["end_turn"], markers["endoftext"], markers["end_tool_call"]}
    blocks: list[dict] = []
    state, buffer = "text", []
    for position, token in enumerate(ids):
        if state == "text" and token in (markers["thinking"], markers["tool_call"]):
            _close(blocks, state, tokenizer.decode(buffer), tool_use_id, finished=True)
            state, buffer = ("thinking" if token == markers["thinking"] else "tool_call"), []
        elif state == "thinking" and token == markers["end_thinking"]:
            _close(blocks, state, tokenizer.decode(buffer), tool_use_id, finished=True)
            state, buffer = "text", []
        elif token in stops:
            finished = state != "tool_call" or token == markers["end_tool_call"]
            _close(blocks, state, tokenizer.decode(buffer), tool_use_id, finished=finished)
            if position != len(ids) - 1:
                raise ValueError(f"token {position + 1} ({ids[position + 1]}) comes after the end of the assistant "
                                 f"turn; pass the tokens of one turn, up to and including its stop token")
            return blocks
        else:  # ordinary text, or a stray marker, which stays in the text as its literal name
            buffer.append(token)
    _close(blocks, state, tokenizer.decode(buffer), tool_use_id, finished=False)
    return blocks


def _close(blocks: list[dict], state: str, text: str, tool_use_id: str, *, finished: bool) -> None:
    """Append the block that ``state`` was reading (an empty text is no block)."""
    if state == "text" and text:
        blocks.append({"type": "text", "text": text})
    elif state == "thinking":
        blocks.append({"type": "thinking", "thinking": text})
    elif state == "tool_call":
        blocks.append(_tool_use(text, tool_use_id, cut_off=not finished))


def _tool_use(body: str, call_id: str, *, cut_off: bool) -> dict:
    shape = 'write {"name": "<tool>", "input": {<arguments>}} between <|tool_call|> and <|end_tool_call|>'
    if cut_off:
        return _malformed(body, call_id, f"the tool call was cut off before <|end_tool_call|>; {shape}")
    try:
        call = json.loads(body, parse_constant=_refuse_constant)
    except ValueError as exc:
        return _malformed(body, call_id, f"the tool call is not valid JSON ({exc}); {shape}")
    if not isinstance(call, dict) or set(call) != {"name", "input"}:
        problem = "the tool call must be a JSON object with exactly the keys name and input"
        return _malformed(body, call_id, f"{problem}; {shape}")
    if not isinstance(call["name"], str) or not call["name"]:
        return _malformed(body, call_id, f"the tool call's name must be a non-empty string; {shape}")
    if not isinstance(call["input"], dict):
        return _malformed(body, call_id, f"the tool call's input must be a JSON object of arguments; {shape}",
                          name=call["name"])
    return {"type": "tool_use", "id": call_id, "name": call["name"], "input": call["input"]}


def _malformed(body: str, call_id: str, error: str, *, name: str = "") -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": body, "error": error}


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")
