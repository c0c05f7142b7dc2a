"""Choosing among whole continuations: the probability of each option, not of its first token.

Decoding token by token commits to a first token before it has read the rest. Where the valid
continuations are a short list (the names of the offered tools), that asks the wrong question:
a constraint that only masks invalid tokens picks the most likely *first token* among the
options, and a name is often told apart by its later tokens (many names start with ``get_``; the
words after it say which tool it is). Scoring every option whole,

    log P(option | context) = sum of log P(token_i | context, token_1 .. token_i-1),

asks the model which option it finds most likely: the choice greedy decoding would make if it
could look ahead. Greedy takes the best; sampling at temperature T draws an option with
probability proportional to P(option)^(1/T), the model's own distribution over the valid options
(token-by-token masking distorts it: an option whose first token is shared by many gets that
token's probability split among them).

It costs one forward pass over the options together (each option a row of a batch), on a copy of
the context's KV cache. A ``ChoiceConstraint`` says when there is a choice to make
(``llmkit.chat.constrained.ToolCallConstraint`` offers the tool names), and ``llmkit.generation.generate``
scores the options and tells the constraint which one won; the constraint then allows only that
option's tokens until they are written.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

import torch

from llmkit.generation.sampling import SamplingParams, TokenConstraint


@runtime_checkable
class ChoiceConstraint(TokenConstraint, Protocol):
    """A ``TokenConstraint`` that sometimes offers a list of whole continuations to choose from.

    ``choices()`` is asked before each draw: None, or the options as lists of token ids (asked
    again at every step until one is chosen). ``choose(index)`` tells it which option won; from
    then on ``allowed()`` admits only that option's next token, until all of it is written.
    """

    def choices(self) -> Sequence[Sequence[int]] | None: ...

    def choose(self, index: int) -> None: ...


ROWS_AT_ONCE = 32  # options scored whole in one pass: each is a copy of the context's cache, which costs memory


def option_log_probs(next_logits: torch.Tensor, options: Sequence[Sequence[int]],
                     continue_with: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """log P(option | context) for each option, shape (len(options),).

    next_logits: the model's logits for the token after the context, shape (vocab,).
    continue_with: runs the model on token ids appended to the context, one row per option, shape
        (len(options), k), and returns the logits at each of those positions, (len(options), k, vocab).
        Rows are padded on the right; under a causal mask padding never changes the positions before it.
    """
    if not options or any(len(option) == 0 for option in options):
        raise ValueError("every option needs at least one token")
    if len(options) > ROWS_AT_ONCE:
        return _best_scored(next_logits, options, continue_with)
    first = torch.log_softmax(next_logits.float(), dim=-1)
    scores = torch.stack([first[option[0]] for option in options])
    longest = max(len(option) for option in options)
    if longest == 1:
        return scores
    fed = torch.tensor([list(option[:-1]) + [option[0]] * (longest - len(option)) for option in options],
                       device=next_logits.device)  # every option but its last token, padded to one length
    later = torch.log_softmax(continue_with(fed).float(), dim=-1)  # (options, longest - 1, vocab)
    for row, option in enumerate(options):
        if len(option) > 1:
            following = torch.tensor(option[1:], device=later.device)
            scores[row] += later[row, torch.arange(len(option) - 1, device=later.device), following].sum()
    return scores


def _best_scored(next_logits: torch.Tensor, options: Sequence[Sequence[int]],
                 continue_with: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Many options (the spans of a conversation, ``llmkit.chat.value_copy``): a beam's first step.
    Score every option's first two tokens (one row per distinct first token), then score whole only
    the ``ROWS_AT_ONCE`` likeliest; the rest get ``-inf``. Two tokens, because options often share
    their first (an opening quote) and part ways at the second."""
    first = torch.log_softmax(next_logits.float(), dim=-1)
    firsts = sorted({option[0] for option in options})
    second = torch.log_softmax(continue_with(torch.tensor([[t] for t in firsts], device=next_logits.device))
                               [:, 0].float(), dim=-1)
    row_of = {token: row for row, token in enumerate(firsts)}
    prefix = torch.stack([first[o[0]] + (second[row_of[o[0]], o[1]] if len(o) > 1 else 0) for o in options])
    keep = prefix.topk(ROWS_AT_ONCE).indices.tolist()
    scores = torch.full((len(options),), float("-inf"), device=next_logits.device)
    scores[keep] = option_log_probs(next_logits, [options[i] for i in keep], continue_with)
    return scores


def pick_option(scores: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Greedy: the highest score (the first of equals). Sampling: an option drawn with probability
    proportional to exp(score / temperature). ``-inf`` marks an option that may not be chosen."""
    if params.greedy:
        return int(scores.argmax())
    probs = torch.softmax(scores / params.temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def choose_option(constraint: ChoiceConstraint, options: Sequence[Sequence[int]], scores: torch.Tensor,
                  params: SamplingParams, generator: torch.Generator | None,
                  suppressed: torch.Tensor | None = None) -> None:
    """Tell ``constraint`` which option won. An option holding a banned (``suppressed``) token may not
    win; if none may, nothing is chosen and the constraint goes on token by token."""
    if suppressed is not None:
        banned = torch.tensor([bool(suppressed[list(option)].any()) for option in options], device=scores.device)
        scores = scores.masked_fill(banned, float("-inf"))
    if torch.isfinite(scores).any():
        constraint.choose(pick_option(scores, params, generator))


def repeat_row(model, cache, row: int, n: int, max_length: int | None = None):
    """A new cache of ``n`` rows, each a copy of ``cache``'s row ``row`` (its filled positions):
    options (or samples) that share one context read it once."""
    wide = model.new_cache(n, max_length=max_length or cache.max_length, dtype=cache.key_table.dtype)
    wide.key_table[:, :, :, :cache.length] = cache.key_table[:, row:row + 1, :, :cache.length]
    wide.value_table[:, :, :, :cache.length] = cache.value_table[:, row:row + 1, :, :cache.length]
    wide.length = cache.length
    return wide


def score_after(model, context: Sequence[int], options: Sequence[Sequence[int]]) -> torch.Tensor:
    """``option_log_probs`` where no KV cache of ``context`` is at hand (a paged serving engine):
    reads ``context`` once into a fresh cache, then every option on a copy of it per option."""
    longest = max(len(option) for option in options)
    with torch.inference_mode():
        cache = model.new_cache(1, max_length=len(context) + max(longest - 1, 1))
        next_logits = model(torch.tensor([list(context)], device=model.device), cache=cache, last_only=True)[0, -1]

        def continue_with(fed: torch.Tensor) -> torch.Tensor:
            return model(fed, cache=repeat_row(model, cache, 0, fed.size(0)))

        return option_log_probs(next_logits, options, continue_with)
