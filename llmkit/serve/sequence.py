"""One request inside the engine: its prompt, its blocks, its tokens, and why it stopped.

The stop rules are ``llmkit.generation.generate``'s, so a request gives the same reply through the
server as through ``generate``: a stop token ends the turn ("end_turn") or a tool call
("tool_use"), a stop sequence in the decoded text ends it ("stop_sequence"), and otherwise the
token budget ("max_tokens") or the context window ("context_window") does.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from llmkit.generation.results import Completion, Generation, StopEvent, TokenEvent, Usage
from llmkit.generation.text_stream import TextStream
from llmkit.generation.sampling import SamplingParams, TokenConstraint, make_generator, mask_tokens, sample_batch


class Cancelled(Exception):
    """The request was cancelled (its client went away) before it finished."""


class RequestTimeout(TimeoutError):
    """The request ran longer than the server allows one request to run."""


@dataclass
class RequestContext:
    """What one HTTP request shares with the engine across its generations (a server tool call
    makes a second one): a way to cancel it, and the prompt tokens it wrote into the cache."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    cache_write_tokens: int = 0

    def cancel(self) -> None:
        self.cancelled.set()


class Sequence:
    """A request's state while the engine runs it; the engine thread alone changes it."""

    def __init__(self, prompt: list[int], *, max_new_tokens: int, context_length: int, params: SamplingParams,
                 seed: int | None, end_turn: frozenset[int], tool_use: frozenset[int], tokenizer,
                 stop_sequences: tuple[str, ...], suppressed: torch.Tensor | None,
                 constraint: TokenConstraint | None, context: RequestContext, deadline: float, device):
        self.prompt, self.params, self.context, self.deadline = prompt, params, context, deadline
        self.max_new_tokens = max_new_tokens
        self.steps = min(max_new_tokens, context_length - len(prompt))  # tokens it may write
        self.generator = None if params.greedy else make_generator(seed, device)
        self.end_turn, self.tool_use = end_turn, tool_use
        self.text = TextStream(tokenizer, stop_sequences) if tokenizer is not None else None
        self.suppressed, self.constraint = suppressed, constraint
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()  # C-level put: no Condition per token
        self.table: list[int] = []  # block ids, in position order
        self.length = 0  # positions whose keys and values are in the blocks
        self.tokens: list[int] = []
        self.cache_read = 0
        self.stop_reason: str | None = None
        self.started = time.perf_counter()
        self.first_token_at: float | None = None

    @property
    def most_positions(self) -> int:
        """Positions it may ever write: the prompt and every new token but the last (never fed back)."""
        return len(self.prompt) + self.steps - 1

    def unread(self) -> list[int]:
        """The tokens whose keys and values are not in the blocks yet: before its first step the
        prompt (past the cached blocks), then the token chosen last."""
        if self.length < len(self.prompt):
            return self.prompt[self.length:]
        return self.tokens[self.length - len(self.prompt):]

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing masked: its token is the row's argmax, so rows like it are chosen
        together (``llmkit.serve.engine.pick_tokens``)."""
        return self.params.greedy and self.constraint is None and self.suppressed is None

    @property
    def cancelled(self) -> bool:
        return self.context.cancelled.is_set()

    def choose(self, logits: torch.Tensor) -> int:
        """Draw the next token from this sequence's row of logits (1, vocab)."""
        allowed = self.constraint.allowed() if self.constraint is not None else None
        if self.suppressed is not None:
            allowed = ~self.suppressed if allowed is None else allowed & ~self.suppressed
        if allowed is not None:
            if not bool(allowed.any()):
                raise ValueError("no token is allowed: the tool-call constraint and the banned tokens rule out "
                                 "every token")
            logits = mask_tokens(logits, allowed.to(logits.device))
        return int(sample_batch(logits, self.params, generator=self.generator)[0])

    def add(self, token: int) -> None:
        """Append a chosen token, decide whether it ends the sequence, and send it to the client."""
        now = time.perf_counter() - self.started
        if self.first_token_at is None:
            self.first_token_at = now
        self.tokens.append(token)
        if self.constraint is not None:
            self.constraint.advance(token)
        delta = None
        if token in self.tool_use:
            self.stop_reason = "tool_use"
        elif token in self.end_turn:
            self.stop_reason = "end_turn"
        elif self.text is not None:
            delta = self.text.add(token)
            if self.text.matched is not None:
                self.stop_reason = "stop_sequence"
        if self.stop_reason is None and len(self.tokens) == self.steps:
            self.stop_reason = "max_tokens" if self.steps == self.max_new_tokens else "context_window"
        if self.stop_reason is not None and self.text is not None:
            delta = (delta or "") + self.text.finish()
        self.outbox.put(TokenEvent(token, delta, 0, now))
        if self.stop_reason is not None:
            self.outbox.put(StopEvent(self.generation(time.perf_counter() - self.started)))

    def generation(self, finished_at: float) -> Generation:
        text = None if self.text is None else self.text.text
        matched = None if self.text is None else self.text.matched
        completion = Completion(self.tokens, text, self.stop_reason, matched)
        decode_time = finished_at - (self.first_token_at or finished_at)
        speed = (len(self.tokens) - 1) / decode_time if len(self.tokens) > 1 and decode_time > 0 else None
        usage = Usage(input_tokens=len(self.prompt) - self.cache_read, output_tokens=len(self.tokens),
                      cache_read_input_tokens=self.cache_read, time_to_first_token=self.first_token_at or 0.0,
                      decode_tokens_per_s=speed)
        return Generation([completion], usage)

    def fail(self, error: BaseException) -> None:
        """End the sequence with an error its reader raises."""
        self.stop_reason = "error"
        self.outbox.put(error)
