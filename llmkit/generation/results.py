"""What a request gives back: the ``Generation`` with its samples and ``Usage``, and the events
``stream`` yields on the way (a ``TokenEvent`` per token, then one ``StopEvent``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

STOP_REASONS = ("end_turn", "max_tokens", "stop_sequence", "tool_use", "context_window")


@dataclass
class Usage:
    """What one request cost, shaped like a Messages API usage block; the one usage row of the
    package (a chat reply, a replayed turn and a traced request all carry one).

    input_tokens: prompt tokens the model read in this request (the prefill).
    cache_read_input_tokens: prompt tokens served from the prefix cache instead; the whole prompt
        is ``input_tokens + cache_read_input_tokens`` (``prompt_tokens``).
    output_tokens: tokens generated, stop tokens included, summed over all samples.
    time_to_first_token: seconds from the call to the first new token (prefix lookup + prefill).
    decode_tokens_per_s: tokens per second after the first (None when only one step ran).
    thinking_tokens: of the output, the tokens inside a thinking block (counted by the chat
        client, which knows the markers; 0 from plain ``generate``).
    server_tool_calls: server tool calls the chat client ran inside the request.
    """

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    time_to_first_token: float | None = None
    decode_tokens_per_s: float | None = None
    thinking_tokens: int = 0
    server_tool_calls: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens


@dataclass
class Completion:
    """One continuation of the prompt.

    ``tokens`` are the new tokens only, including a final stop token (it was generated, and it is
    billed); ``text`` (with a tokenizer) leaves out that stop token and any matched stop sequence.
    ``stop_sequence`` is the stop sequence that matched, if that is why it stopped. ``logits``
    (with ``keep_logits=True``) are the model's raw scores at each step, shape (len(tokens), vocab).
    """

    tokens: list[int]
    text: str | None
    stop_reason: str
    stop_sequence: str | None = None
    logits: torch.Tensor | None = None


@dataclass
class Generation:
    """The result of one request: ``num_samples`` completions that shared one prefill, and its usage.

    ``tokens``, ``text``, ``stop_reason``, ``stop_sequence`` and ``logits`` are those of the first
    sample, so single-sample code reads ``generation.text``; with ``num_samples > 1`` read
    ``generation.samples``. Usage covers the whole request: the prompt was read once.
    """

    samples: list[Completion]
    usage: Usage

    tokens = property(lambda self: self.samples[0].tokens)
    text = property(lambda self: self.samples[0].text)
    stop_reason = property(lambda self: self.samples[0].stop_reason)
    stop_sequence = property(lambda self: self.samples[0].stop_sequence)
    logits = property(lambda self: self.samples[0].logits)


@dataclass(frozen=True)
class TokenEvent:
    """One new token while streaming. ``text`` is the text that became final with it: '' while a
    UTF-8 character is split across tokens or the text might be the start of a stop sequence, and
    None without a tokenizer. Joining a sample's ``text`` pieces gives its final ``Completion.text``.
    ``elapsed`` is seconds since the request started (time spent waiting for the reader excluded):
    a long wait for the first token (the prefill), then a steady beat, one forward pass per token."""

    token: int
    text: str | None
    sample: int = 0
    elapsed: float = 0.0
    type: ClassVar[str] = "token"


@dataclass(frozen=True)
class StopEvent:
    """The last event of a stream: why it stopped, what it cost, and the whole ``Generation``."""

    generation: Generation
    type: ClassVar[str] = "stop"

    stop_reason = property(lambda self: self.generation.stop_reason)
    stop_sequence = property(lambda self: self.generation.stop_sequence)
    usage = property(lambda self: self.generation.usage)
