"""The chat markers: the control tokens the chat template places between ordinary text.

The course tokenizer reserves them from the start (see DEVELOPERS.md), so a base model already
has an embedding row for each and fine-tuning never resizes the table. Only the template writes
them; the text of a message can never produce one (``llmkit.chat.template``).
"""
from __future__ import annotations

MARKERS = {
    "endoftext": "<|endoftext|>",
    "system": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "tools": "<|tools|>",
    "thinking": "<|thinking|>",
    "end_thinking": "<|end_thinking|>",
    "tool_call": "<|tool_call|>",
    "end_tool_call": "<|end_tool_call|>",
    "tool_result": "<|tool_result|>",
    "end_tool_result": "<|end_tool_result|>",
    "end_turn": "<|end_turn|>",
}


def marker_ids(tokenizer) -> dict[str, int]:
    """Short name -> id of each chat marker, e.g. ``marker_ids(tok)["end_turn"]``."""
    special = tokenizer.special_tokens
    missing = [text for text in MARKERS.values() if text not in special]
    if missing:
        raise ValueError(
            f"this tokenizer has no chat markers {missing}; use the course tokenizer "
            f"(data/models/base/tokenizer.json) or train one with llmkit.tokens.tokenizer.COURSE_SPECIAL_TOKENS"
        )
    return {name: special[text] for name, text in MARKERS.items()}

