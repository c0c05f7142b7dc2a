"""Checking a generation request: every argument of ``stream`` in one place, each mistake named
with its fix, before any work starts (so a stream raises on the call, not at its first token)."""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from llmkit.checks import check_bool, check_int
from llmkit.generation.prefix_cache import PrefixCache
from llmkit.generation.sampling import GREEDY, SamplingParams, TokenConstraint
from llmkit.model.transformer import Transformer


@dataclass(frozen=True)
class Request:
    """One request's arguments, checked and in the forms the loop uses."""

    prompt: list[int]
    max_new_tokens: int
    params: SamplingParams
    end_turn: frozenset[int]
    tool_use: frozenset[int]
    stops: tuple[str, ...]
    tokenizer: object
    seed: int | None
    use_cache: bool
    prefix_cache: PrefixCache | None
    num_samples: int
    keep_logits: bool
    suppressed: frozenset[int]
    constraints: list[TokenConstraint] | None


MAX_SAMPLES = 256
"""Continuations of one prompt per request: each holds a KV cache of the whole window, so an
unbounded count is an unbounded allocation; for more, send several requests."""


def check_request(model: Transformer, prompt_ids, *, max_new_tokens, sampling, stop_tokens, tool_stop_tokens,
                   stop_sequences, tokenizer, seed, use_cache, prefix_cache, num_samples, keep_logits,
                   suppress_tokens, constraint) -> Request:
    """Every argument of ``stream`` checked, each with an error that names it and the fix."""
    prompt = check_prompt(model, prompt_ids)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    num_samples = check_int("num_samples", num_samples, minimum=1, maximum=MAX_SAMPLES)
    use_cache, keep_logits = check_bool("use_cache", use_cache), check_bool("keep_logits", keep_logits)
    params = GREEDY if sampling is None else sampling
    if not isinstance(params, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams (or None for greedy), got {type(params).__name__}")
    end_turn = check_token_set(stop_tokens, "stop_tokens", model)
    tool_use = check_token_set(tool_stop_tokens, "tool_stop_tokens", model)
    if end_turn & tool_use:
        raise ValueError(f"token(s) {sorted(end_turn & tool_use)} are in both stop_tokens and tool_stop_tokens; "
                         "each stop token means one stop reason")
    suppressed = check_token_set(suppress_tokens, "suppress_tokens", model)
    if len(suppressed) == model.config.vocab_size:
        raise ValueError("suppress_tokens holds every token of the vocabulary, so nothing could be generated")
    if constraint is not None and not callable(constraint):
        raise TypeError("constraint must be a function that returns a new TokenConstraint (one per sample), e.g. "
                        f"functools.partial(ToolCallConstraint, tokenizer, tools); got {type(constraint).__name__}")
    if tokenizer is not None and tokenizer.vocab_size < model.config.vocab_size:
        raise ValueError(f"the model scores {model.config.vocab_size} tokens but the tokenizer knows only "
                         f"{tokenizer.vocab_size}, so some tokens could not be decoded; use the tokenizer "
                         "the model was trained with")
    if prefix_cache is not None and not isinstance(prefix_cache, PrefixCache):
        raise TypeError(f"prefix_cache must be a PrefixCache, got {type(prefix_cache).__name__}")
    if prefix_cache is not None and not use_cache:
        raise ValueError("prefix_cache reuses KV-cache entries, so it needs use_cache=True")
    stops = check_stop_sequences(stop_sequences, tokenizer)
    return Request(prompt, max_new_tokens, params, end_turn, tool_use, stops, tokenizer, seed, use_cache,
                    prefix_cache, num_samples, keep_logits, suppressed, make_constraints(constraint, num_samples))


def check_prompt(model: Transformer, prompt_ids) -> list[int]:
    if isinstance(prompt_ids, str):
        raise TypeError("prompt_ids must be token ids, not text; encode it first: tokenizer.encode(text)")
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dim() == 2 and prompt_ids.size(0) == 1:
            prompt_ids = prompt_ids[0]
        if prompt_ids.dim() != 1:
            raise ValueError(f"prompt_ids must be one prompt, shape (T,) or (1, T), got {tuple(prompt_ids.shape)}; "
                             "for several continuations of one prompt use num_samples")
        prompt_ids = prompt_ids.tolist()
    try:
        prompt = [operator.index(t) for t in prompt_ids]
    except TypeError:
        raise TypeError("prompt_ids must be a sequence of integer token ids") from None
    vocab, context = model.config.vocab_size, model.config.context_length
    if not prompt:
        raise ValueError("the prompt is empty; give at least one token (a base model is often started "
                         "with <|endoftext|>)")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the model's vocabulary (0 .. {vocab - 1}); "
                         "was the prompt encoded with a different tokenizer?")
    if len(prompt) >= context:
        raise ValueError(f"the prompt is {len(prompt)} tokens but the model's context window is {context}, "
                         "which leaves no room for a new token; shorten the prompt (drop the oldest turns)")
    return prompt


def check_token_set(tokens, name: str, model: Transformer) -> frozenset[int]:
    if isinstance(tokens, (int, str)):
        raise TypeError(f"{name} must be a collection of token ids, e.g. [{tokens!r}], not a single value")
    ids = frozenset(operator.index(t) for t in tokens)
    bad = sorted(t for t in ids if not 0 <= t < model.config.vocab_size)
    if bad:
        raise ValueError(f"{name} has id(s) {bad} outside the vocabulary (0 .. {model.config.vocab_size - 1})")
    return ids


def make_constraints(constraint, n: int) -> list[TokenConstraint] | None:
    if constraint is None:
        return None
    made = [constraint() for _ in range(n)]
    for item in made:
        if not isinstance(item, TokenConstraint):
            raise TypeError(f"constraint() returned a {type(item).__name__}, which is not a TokenConstraint: it "
                            "needs allowed() -> bool tensor or None, and advance(token)")
    if len({id(item) for item in made}) < n:
        raise ValueError("constraint() returned the same object twice; it must make a new one on each call, "
                         "since every sample keeps its own state")
    return made


def check_stop_sequences(stop_sequences, tokenizer) -> tuple[str, ...]:
    """``stop_sequences`` as a tuple of non-empty strings (checked once, here, for every caller)."""
    if isinstance(stop_sequences, str):
        raise TypeError(f"stop_sequences must be a list of strings, e.g. [{stop_sequences!r}], not one string")
    stops = tuple(stop_sequences)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise ValueError(f"every stop sequence must be a non-empty string, got {s!r}")
    if stops and tokenizer is None:
        raise ValueError("stop_sequences are matched in the decoded text, so pass tokenizer= as well")
    return stops
