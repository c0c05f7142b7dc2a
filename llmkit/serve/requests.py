"""What both APIs check the same way: the request as the chat client's arguments, sampling
fields, and how many tools one request may offer."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmkit.serve.errors import bad_request


@dataclass
class ChatRequest:
    """A checked request: the model it names, its token budget, the chat client's other
    arguments (messages, system, tools, sampling, ...), and whether to stream."""

    model: str
    max_tokens: Any
    arguments: dict
    stream: bool


def expect(condition: bool, message: str, param: Any = None) -> None:
    """Raise a 400 saying ``message`` unless ``condition`` holds."""
    if not condition:
        raise bad_request(message, param[0] if isinstance(param, list) and param else param)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_sampling(body: dict, *, temperature_max: float) -> dict:
    """temperature, top_p, top_k (and seed) as the chat client takes them. Hosted APIs default
    to temperature 1.0, and so does the server."""
    temperature, top_p, top_k = body.get("temperature"), body.get("top_p"), body.get("top_k")
    expect(temperature is None or (is_number(temperature) and 0 <= temperature <= temperature_max),
           f"temperature: must be a number from 0 to {temperature_max:g}", "temperature")
    expect(top_p is None or (is_number(top_p) and 0 < top_p <= 1), "top_p: must be a number in (0, 1]", "top_p")
    expect(top_k is None or (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1),
           "top_k: must be a whole number >= 1", "top_k")
    seed = body.get("seed")
    expect(seed is None or (isinstance(seed, int) and not isinstance(seed, bool)), "seed: must be an integer", "seed")
    return dict(temperature=1.0 if temperature is None else float(temperature),
                top_p=1.0 if top_p is None else float(top_p), top_k=top_k, seed=seed)


def check_tools_limit(tools: list, max_tools: int) -> None:
    expect(len(tools) <= max_tools, f"tools: {len(tools)} tools offered, at most {max_tools} per request", "tools")


def check_max_tokens(value: Any, context_length: int, name: str = "max_tokens") -> int:
    """A whole number from 1 to the context window (the model can never write more)."""
    expect(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
           f"{name}: must be a whole number >= 1, got {value!r}", name)
    expect(value <= context_length, f"{name}: {value} is more than this model's whole context window "
                                    f"({context_length} tokens, prompt included); ask for at most {context_length}",
           name)
    return value
