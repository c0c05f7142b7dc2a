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

from llmkit.checks import check_int, check_number

NEG_INF = float("-inf")

#: The stages ``process_logits`` applies, in order (the names ``stage_probabilities`` reports).
STAGES = ("model", "repetition penalty", "temperature", "top-k", "top-p", "min-p")


def _check_range(name: str, value, low: float | None, high: float | None, rule: str) -> float:
    """A finite number within [low, high], or an error that states the rule."""
    check_number(name, value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {rule}, got {value}")
    return value


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
        _check_range("temperature", self.temperature, 0, None, "a number >= 0 (0 means greedy)")
        if self.top_k is not None:
            check_int("top_k", self.top_k)
            if self.top_k < 1:
                raise ValueError(f"top_k must be a whole number >= 1, or None to keep every token; got {self.top_k!r}")
        if not 0 < check_number("top_p", self.top_p) <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1.0 keeps every token), got {self.top_p}")
        _check_range("min_p", self.min_p, 0, 1, "in [0, 1] (0.0 keeps every token)")
        if not check_number("repetition_penalty", self.repetition_penalty) > 0:
            raise ValueError(f"repetition_penalty must be a number > 0 (1.0 is off), got {self.repetition_penalty}")

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
    if not check_number("penalty", penalty) > 0:
        raise ValueError(f"penalty must be a number > 0 (1.0 is off), got {penalty}")
    if penalty == 1.0 or previous_tokens is None:
        return logits
    previous = torch.as_tensor(previous_tokens, device=logits.device)
    if previous.numel() == 0:
        return logits
    _check_token_ids(previous, logits.shape[-1])
    previous = previous.long()
    if previous.dim() < logits.dim():
        previous = previous.expand(*logits.shape[:-1], previous.shape[-1])
    seen = logits.gather(-1, previous)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, previous, seen)


def _check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    if ids.is_floating_point() or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"previous_tokens must be integer token ids, got a tensor of {ids.dtype}")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"previous_tokens holds the id {bad}, outside this vocabulary of {vocab_size} logits "
            f"(valid ids are 0..{vocab_size - 1}); were the ids made by a different tokenizer?"
        )


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
    """Keep the k highest-scoring tokens (tokens tied with the k-th are kept too); None keeps all."""
    if k is None:
        return logits
    if check_int("k", k) < 1:
        raise ValueError(f"top-k needs k >= 1 (k=1 is greedy), or None to keep every token; got {k}")
    if k >= logits.shape[-1]:
        return logits
    kth_best = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth_best, NEG_INF)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens until their probabilities add up to p (nucleus sampling).

    Walking down the sorted list, a token is dropped once the tokens before it already reach p;
    the most likely token is always kept, so p=0 keeps exactly the top token. The running sum is
    taken in float64: near p = 1 the last tokens' probabilities are smaller than float32's
    rounding error on a sum close to 1, so a float32 sum would put the cut in the wrong place.
    """
    if not 0 <= check_number("p", p) <= 1:
        raise ValueError(f"top-p needs 0 <= p <= 1 (1.0 keeps every token), got {p}")
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(-1, descending=True)
    sorted_probs = _float64(sorted_logits).softmax(-1)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False  # the most likely token always stays
    drop_sorted = drop_sorted.to(logits.device)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, NEG_INF)


def _float64(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float64; Apple's MPS has no float64, so there the sum is done on the CPU."""
    return (x.cpu() if x.device.type == "mps" else x).double()


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Keep tokens whose probability is at least ``min_p`` times the top token's.

    In log space that is ``logit >= top_logit + log(min_p)``: no softmax needed, nothing underflows.
    """
    if not 0 <= check_number("min_p", min_p) <= 1:
        raise ValueError(f"min_p must be in [0, 1] (0.0 keeps every token, 1.0 only the top ones), got {min_p}")
    if min_p <= 0:
        return logits
    cutoff = logits.amax(-1, keepdim=True) + math.log(min_p)
    return logits.masked_fill(logits < cutoff, NEG_INF)


def _fall_back_to_top_token(processed: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    """Rows where nothing finite survived (or a NaN/inf crept in) keep only the original top token.

    The processors above always keep the top token, so this only fires on degenerate input
    (NaN or inf logits; ``sample`` refuses rows that are all -inf); it guarantees softmax never
    returns NaN, which keeps the plots of ``stage_probabilities`` drawable whatever the input.
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


def _check_something_allowed(logits: torch.Tensor) -> None:
    """Refuse rows where no token can be drawn, rather than quietly returning token 0."""
    empty = ~(logits > NEG_INF).any(-1)  # NaN > -inf is False, so all-NaN rows count too
    if empty.any():
        row = int(empty.reshape(-1).nonzero()[0, 0])
        raise ValueError(
            f"row {row} of the logits rules out every token (all are -inf or NaN), so there is nothing to "
            f"draw from: a mask or constraint allowed no token, or the model produced NaN. Allow at least "
            f"one token, or check the model's output"
        )


def make_generator(seed: int | None = None, device: torch.device | str = "cpu") -> torch.Generator:
    """A private random number generator: seeded for reproducible draws, or fresh entropy if None.

    A seed is a whole number that fits torch's 64 bits (negative ones are allowed, as in torch).
    """
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(check_int("seed", seed, minimum=-(2**63), maximum=2**64 - 1))
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
    its processed distribution with ``generator``. A row that rules out every token (all -inf
    or NaN, e.g. a mask that allows nothing) has nothing to draw from and raises ``ValueError``.
    """
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    _check_something_allowed(logits)
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
