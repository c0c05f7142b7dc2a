"""Sampling: from the model's scores for every token to the one token that comes next.

The model gives a score (a logit) to every token in the vocabulary; softmax turns the scores
into probabilities. Sampling reshapes that distribution, then draws one token from it:

    logits -> repetition penalty -> temperature -> top-k -> top-p -> min-p -> softmax -> draw

Each step is a small function from logits to logits, so they compose, can be used alone, and can
be shown one at a time (``stage_probabilities``). Filters remove a token by setting its logit to
-inf, which softmax turns into a probability of exactly 0; the survivors are renormalised for free.

Some tokens can be ruled out before any of that: ``mask_tokens`` gives every token that is not
allowed a logit of -inf, so the stages only ever share probability among the allowed ones. A
``TokenConstraint`` decides which tokens are allowed, step by step (``llmkit.chat.constrained`` keeps
a tool call valid JSON for its schema).

Temperature 0 means greedy: always the most likely token, no randomness. Every random draw takes
an explicit ``torch.Generator`` (or a ``seed`` to make one), never torch's global random state,
so the same seed gives the same token and two runs never disturb each other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch

NEG_INF = float("-inf")

#: The stages ``process_logits`` applies, in order (the names ``stage_probabilities`` reports).
STAGES = ("model", "repetition penalty", "temperature", "top-k", "top-p", "min-p")


@dataclass(frozen=True)
class SamplingParams:
    """How to choose the next token. The defaults sample from the model's own distribution.

    temperature: divide the logits by T before softmax; T < 1 sharpens, T > 1 flattens,
        0 means greedy (always the most likely token).
    top_k: keep only the k most likely tokens (None keeps all).
    top_p: keep the smallest set of most likely tokens whose probability adds up to p
        ("nucleus sampling"; 1.0 keeps all).
    min_p: keep tokens at least min_p times as likely as the most likely one (0.0 keeps all);
        the cut-off follows the model's confidence, unlike top-k's fixed count.
    repetition_penalty: make tokens that already appeared less likely (1.0 = off, > 1 penalises).
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 means greedy), got {self.temperature}"
            )
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise ValueError(f"top_k must be a whole number >= 1, or None to keep every token; got {self.top_k!r}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1.0 keeps every token), got {self.top_p}")
        if not (0 <= self.min_p <= 1):
            raise ValueError(f"min_p must be in [0, 1] (0.0 keeps every token), got {self.min_p}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(
                f"repetition_penalty must be a finite number > 0 (1.0 is off), got {self.repetition_penalty}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = SamplingParams(temperature=0.0)


# --- ruling tokens out before sampling ---


@runtime_checkable
class TokenConstraint(Protocol):
    """Which tokens may come next, decided afresh at every step of one continuation.

    ``allowed()`` is asked before each draw: a bool tensor over the vocabulary (True: may be drawn),
    or None for "no restriction right now", which costs nothing. ``advance(token)`` is then told the
    token that was drawn, so the constraint can move on. It keeps state, so each continuation needs
    its own: ``llmkit.generation.generate`` takes a function that makes a fresh one.
    """

    def allowed(self) -> torch.Tensor | None: ...

    def advance(self, token: int) -> None: ...


def mask_tokens(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """-inf for every token where ``allowed`` is False, so softmax gives it probability exactly 0.

    Applied to the raw logits, before the stages below, so temperature, top-k, top-p and min-p
    see only the allowed tokens (a top-k of 5 keeps the 5 best *allowed* tokens).
    """
    return logits.masked_fill(~allowed, NEG_INF)


# --- the processors: logits in, logits out, over the last dimension (one row or a batch) ---


def apply_repetition_penalty(
    logits: torch.Tensor, previous_tokens: torch.Tensor | Sequence[int] | None, penalty: float
) -> torch.Tensor:
    """Make every token that already appeared less likely (the CTRL paper's rule).

    A positive logit is divided by the penalty and a negative one multiplied, so both move down.
    ``previous_tokens`` is the context so far: shape (L,) for one row, (N, L) for N rows.
    """
    if penalty == 1.0 or previous_tokens is None:
        return logits
    previous = torch.as_tensor(previous_tokens, dtype=torch.long, device=logits.device)
    if previous.numel() == 0:
        return logits
    if previous.dim() < logits.dim():
        previous = previous.expand(*logits.shape[:-1], previous.shape[-1])
    seen = logits.gather(-1, previous)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, previous, seen)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divide the logits by the temperature. Temperature 0 is the limit: only the top token stays.

    The largest logit is subtracted first. Softmax does not change under that shift, and it means
    a tiny temperature gives very negative numbers instead of overflowing to inf.
    """
    if temperature == 0:
        return keep_top_token(logits)
    if temperature == 1.0:
        return logits
    return (logits - logits.amax(-1, keepdim=True)) / temperature


def keep_top_token(logits: torch.Tensor) -> torch.Tensor:
    """Greedy as a filter: -inf everywhere except the most likely token (the first one on a tie)."""
    top = logits.argmax(-1, keepdim=True)
    return torch.full_like(logits, NEG_INF).scatter(-1, top, logits.gather(-1, top))


def top_k_filter(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """Keep the k highest-scoring tokens (tokens tied with the k-th are kept too)."""
    if k is None or k >= logits.shape[-1]:
        return logits
    kth_best = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth_best, NEG_INF)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens until their probabilities add up to p (nucleus sampling).

    Walking down the sorted list, a token is dropped once the tokens before it already reach p;
    the most likely token is therefore always kept.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(-1, descending=True)
    sorted_probs = sorted_logits.softmax(-1)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    drop_sorted = mass_before >= p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, NEG_INF)


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Keep tokens whose probability is at least ``min_p`` times the top token's.

    In log space that is ``logit >= top_logit + log(min_p)``: no softmax needed, nothing underflows.
    """
    if min_p <= 0:
        return logits
    cutoff = logits.amax(-1, keepdim=True) + math.log(min_p)
    return logits.masked_fill(logits < cutoff, NEG_INF)


def _fall_back_to_top_token(processed: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    """Rows where nothing finite survived (or a NaN/inf crept in) keep only the original top token.

    The processors above always keep the top token, so this only fires on degenerate input
    (all -inf, NaN or inf logits); it guarantees softmax never returns NaN.
    """
    broken = ~torch.isfinite(processed).any(-1) | (torch.isnan(processed) | (processed == float("inf"))).any(-1)
    if not broken.any():
        return processed
    top = torch.nan_to_num(original, nan=NEG_INF).argmax(-1, keepdim=True)
    one_hot = torch.full_like(processed, NEG_INF).scatter(-1, top, 0.0)
    return torch.where(broken.unsqueeze(-1), one_hot, processed)


def _stages(params: SamplingParams, previous_tokens) -> list:
    return [
        ("repetition penalty", lambda x: apply_repetition_penalty(x, previous_tokens, params.repetition_penalty)),
        ("temperature", lambda x: apply_temperature(x, params.temperature)),
        ("top-k", lambda x: top_k_filter(x, params.top_k)),
        ("top-p", lambda x: top_p_filter(x, params.top_p)),
        ("min-p", lambda x: min_p_filter(x, params.min_p)),
    ]


def process_logits(
    logits: torch.Tensor, params: SamplingParams, previous_tokens: torch.Tensor | Sequence[int] | None = None
) -> torch.Tensor:
    """Apply every stage in order; the result's softmax is the distribution a token is drawn from."""
    x = logits.float()
    for _, stage in _stages(params, previous_tokens):
        x = stage(x)
    return _fall_back_to_top_token(x, logits)


def stage_probabilities(
    logits: torch.Tensor, params: SamplingParams, previous_tokens: torch.Tensor | Sequence[int] | None = None
) -> dict[str, torch.Tensor]:
    """The probabilities after each stage, keyed by the names in ``STAGES`` (for plots and widgets).

    ``"model"`` is the model's own distribution; the last entry is what ``sample`` draws from.
    A stage that is switched off repeats the previous distribution.
    """
    x = logits.float()
    out = {"model": _fall_back_to_top_token(x, logits).softmax(-1)}
    for name, stage in _stages(params, previous_tokens):
        x = stage(x)
        out[name] = _fall_back_to_top_token(x, logits).softmax(-1)
    return out


# --- drawing a token ---


def make_generator(seed: int | None = None, device: torch.device | str = "cpu") -> torch.Generator:
    """A private random number generator: seeded for reproducible draws, or fresh entropy if None."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


def sample_batch(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    generator: torch.Generator | None = None,
    previous_tokens: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """One token per row of ``logits`` (shape (N, vocab)), as a tensor of N token ids.

    Greedy needs no random draw (and uses none); otherwise each row is drawn independently from
    its processed distribution with ``generator``.
    """
    if params.greedy:
        return apply_repetition_penalty(logits, previous_tokens, params.repetition_penalty).argmax(-1)
    probs = process_logits(logits, params, previous_tokens).softmax(-1)
    if generator is None:
        generator = make_generator(None, logits.device)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample(
    logits: torch.Tensor,
    params: SamplingParams | None = None,
    *,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    previous_tokens: torch.Tensor | Sequence[int] | None = None,
) -> int:
    """Draw one token id from a single logits vector (shape (vocab,)).

    Pass ``seed`` (or your own ``generator``, to continue one random stream over many calls) for a
    reproducible draw; with neither, the draw uses fresh randomness, like a real API.
    ``previous_tokens`` is only needed for the repetition penalty.
    """
    if logits.dim() != 1:
        raise ValueError(
            f"sample() takes one logits vector of shape (vocab,), got shape {tuple(logits.shape)}; "
            "use logits[0, -1] for a model output, or sample_batch() for several rows"
        )
    if generator is not None and seed is not None:
        raise ValueError("pass either seed or generator to sample(), not both")
    params = params or SamplingParams()
    if generator is None and not params.greedy:
        generator = make_generator(seed, logits.device)
    return int(sample_batch(logits[None], params, generator=generator, previous_tokens=previous_tokens)[0])
