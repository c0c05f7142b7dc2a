"""Measuring the loop: where the time of a generation goes, and what the caches save.

Everything here *times* ``llmkit.generation.generate``; nothing re-implements it. The loop's own stopwatch
(``TokenEvent.elapsed``, ``Usage.time_to_first_token``) gives the numbers:

    time to first token   prefix-cache lookup + prefill of the prompt + the first draw
    a later token's time  one decode step: a forward pass for one token, plus the draw

Timings on a shared machine are noisy, so each measurement can be repeated and the median kept.
The token counts (how much was cached, how much recomputed) are exact and do not vary.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from llmkit.chat.client import Client
from llmkit.chat.trace import RequestRow, Trace, request_rows
from llmkit.generation.generate import PrefixCache, StopEvent, Usage, generate, stream
from llmkit.model.transformer import Transformer
from llmkit.generation.sampling import SamplingParams


def token_times(model: Transformer, prompt_ids: Sequence[int], n_tokens: int, *, use_cache: bool = True) -> list[float]:
    """Seconds each new token took, greedy, in order: the first entry is the time to first token
    (the prefill), each later one is a decode step. ``use_cache=False`` recomputes the whole
    sequence at every step, so its steps grow with the text."""
    times, previous = [], 0.0
    for event in stream(model, prompt_ids, max_new_tokens=n_tokens, use_cache=use_cache):
        if isinstance(event, StopEvent):
            break
        times.append(event.elapsed - previous)
        previous = event.elapsed
    return times


@dataclass(frozen=True)
class PrefillDecode:
    """Cost per token of reading the prompt (prefill) and of writing the answer (decode)."""

    prompt_tokens: int
    output_tokens: int
    prefill_s: float  # the whole prompt, one forward pass (median over repeats)
    decode_s_per_token: float  # one decode step (median over every step of every repeat)

    @property
    def prefill_s_per_token(self) -> float:
        return self.prefill_s / self.prompt_tokens

    @property
    def decode_over_prefill(self) -> float:
        """How many times more an output token costs than an input token."""
        return self.decode_s_per_token / self.prefill_s_per_token


def prefill_vs_decode(model: Transformer, prompt_ids: Sequence[int], n_tokens: int = 32,
                      repeats: int = 3) -> PrefillDecode:
    """Time the prefill of ``prompt_ids`` and ``n_tokens`` decode steps after it (with the KV cache).

    The prompt must leave room for the new tokens in the context window."""
    if len(prompt_ids) + n_tokens > model.config.context_length:
        raise ValueError(f"a {len(prompt_ids)}-token prompt plus {n_tokens} new tokens does not fit the "
                         f"{model.config.context_length}-token context window; shorten one of them")
    if n_tokens < 2:
        raise ValueError("n_tokens must be at least 2: one token for the prefill, the rest for decode steps")
    token_times(model, prompt_ids[:8], 2)  # warm-up: first calls pay for memory allocation
    prefills, steps = [], []
    for _ in range(repeats):
        times = token_times(model, prompt_ids, n_tokens)
        prefills.append(times[0])
        steps.extend(times[1:])
    return PrefillDecode(len(prompt_ids), n_tokens, statistics.median(prefills), statistics.median(steps))


@dataclass(frozen=True)
class ContextCost:
    """What a prompt of ``tokens`` tokens costs: prefill time (measured) and KV-cache memory."""

    tokens: int
    prefill_s: float
    kv_cache_bytes: int


def context_costs(model: Transformer, long_prompt: Sequence[int], lengths: Sequence[int],
                  repeats: int = 3) -> list[ContextCost]:
    """Prefill time and KV-cache bytes for the first ``n`` tokens of ``long_prompt``, for each n.

    The bytes are those of a real KV cache holding n positions, made by the model the way the
    loop makes one (in the model's dtype and on its device)."""
    if max(lengths) > len(long_prompt):
        raise ValueError(f"long_prompt has {len(long_prompt)} tokens, fewer than the longest length "
                         f"{max(lengths)}; pass a longer text")
    token_times(model, long_prompt[:8], 2)  # warm-up
    costs = []
    for n in lengths:
        prefill = statistics.median(token_times(model, long_prompt[:n], 1)[0] for _ in range(repeats))
        costs.append(ContextCost(n, prefill, model.new_cache(1, max_length=n).nbytes))
    return costs


@dataclass(frozen=True)
class ReadCost:
    """Time to first token for a prompt whose first ``cached_tokens`` came from a prefix cache,
    so that only the last ``read_tokens`` went through the model."""

    read_tokens: int
    cached_tokens: int
    time_to_first_token: float


def read_costs(model: Transformer, prompt_ids: Sequence[int], read_counts: Sequence[int],
               repeats: int = 5) -> list[ReadCost]:
    """Time to first token of ``prompt_ids`` when all but its last n tokens are already cached,
    for each n in ``read_counts`` (n = the whole prompt means nothing is cached).

    This is what prompt caching cannot remove: the cost of reading the new tokens, and a fixed
    cost of every forward pass, however short (every layer runs, every weight is read). For each
    n a fresh ``PrefixCache`` is filled with the first ``len(prompt_ids) - n`` tokens and the
    prompt is sent again; the median of ``repeats`` requests is kept."""
    prompt = list(prompt_ids)
    bad = [n for n in read_counts if not 1 <= n <= len(prompt)]
    if bad:
        raise ValueError(f"each read count must be between 1 and the prompt's {len(prompt)} tokens "
                         f"(at least one token is always read: its logits choose the next token), got {bad[0]}")
    token_times(model, prompt[:8], 2)  # warm-up
    costs = []
    for n in read_counts:
        times = []
        for _ in range(repeats):
            prefix_cache = PrefixCache(max_bytes=2**30)
            if n < len(prompt):  # a one-token request stores exactly the prompt it read
                generate(model, prompt[:len(prompt) - n], max_new_tokens=1, prefix_cache=prefix_cache)
            usage = generate(model, prompt, max_new_tokens=1, prefix_cache=prefix_cache).usage
            times.append(usage.time_to_first_token)
        costs.append(ReadCost(usage.input_tokens, usage.cache_read_input_tokens, statistics.median(times)))
    return costs


@dataclass(frozen=True)
class Turn:
    """One request of a conversation whose whole history is sent again every turn: its number,
    the reply, and its ``Usage`` (the whole history is ``usage.prompt_tokens``; of it,
    ``usage.cache_read_input_tokens`` came from the prefix cache and ``usage.input_tokens`` were
    recomputed)."""

    turn: int
    reply: str
    usage: Usage


def replay_conversation(model: Transformer, tokenizer, messages: Sequence[str], *,
                        prefix_cache: PrefixCache | None = None, max_new_tokens: int = 16,
                        stop_sequences: Sequence[str] = ("\n\n",), sampling: SamplingParams | None = None,
                        seed: int = 0) -> tuple[list[Turn], list[int]]:
    """Send a growing conversation turn by turn, the way a chat harness does: each request is the
    whole history (earlier messages and replies) plus the next message. Replies are greedy by
    default; with ``sampling``, turn t is drawn with seed ``seed + t``. Either way two runs of the
    same conversation write the same replies, cached or not.

    The history is kept as token ids and only the new message is encoded, as a chat template does,
    so the tokens of earlier turns never change and a prefix cache can find them. Returns one
    ``Turn`` per message and the final history's ids (for re-sending it)."""
    history: list[int] = []
    turns = []
    for number, message in enumerate(messages, 1):
        prompt = history + tokenizer.encode(message)
        result = generate(model, prompt, max_new_tokens=max_new_tokens, tokenizer=tokenizer,
                          stop_sequences=stop_sequences, prefix_cache=prefix_cache, sampling=sampling,
                          seed=seed + number)
        turns.append(Turn(number, result.text, result.usage))
        history = prompt + result.tokens
    return turns, history


def median_time_to_first_token(runs: Sequence[Sequence[Any]]) -> list[float]:
    """Per request, the median time to first token over several runs of the same requests (each
    run a list of rows with a ``usage``: ``Turn``, ``llmkit.chat.trace.RequestRow``). Timings on a
    shared machine are noisy; the median of a few runs is steadier than any one."""
    if not runs or len({len(run) for run in runs}) != 1:
        raise ValueError(f"runs must be one or more runs with the same number of requests, got lengths "
                         f"{[len(run) for run in runs]}")
    return [statistics.median(run[i].usage.time_to_first_token for run in runs) for i in range(len(runs[0]))]


def replay_chat(client: Client, messages: Sequence[str], *, system: str | None = None,
                **create: Any) -> list[RequestRow]:
    """Send ``messages`` as user turns, one request each, continuing the stored conversation
    (``previous_id``) the way a chat app does, and return one ``RequestRow`` per turn. ``system``
    goes with the first request; the stored conversation keeps it for the rest.

    ``create`` goes to every ``client.messages.create`` (``max_tokens``, ``temperature``, ``cache``,
    ...). Pass a fresh ``Client.from_model(model, tokenizer)`` to start with an empty prompt cache;
    the last row's ``id`` is the stored conversation's id in ``client.conversations``."""
    trace, previous = Trace(), None
    for text in messages:
        reply = client.messages.create(messages=[{"role": "user", "content": text}], previous_id=previous,
                                       system=system if previous is None else None, trace=trace, **create)
        previous = reply.id
    return request_rows(trace)
