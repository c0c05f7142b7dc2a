"""Supervised fine-tuning (SFT) batches: conversations in, a loss on the assistant's tokens only.

SFT shows the model conversations rendered with the chat template and trains it to predict *the
assistant's tokens*: thinking, text, tool calls and ``<|end_turn|>``. The template's mask marks
them. The user's words, the system prompt, tool definitions and tool results are read but never
supervised: we want a model that answers questions, not one that writes them. Conversations of
different lengths share a batch by padding: pad positions are masked, so they cost compute but
teach nothing.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Protocol, Sequence

import torch

from llmkit.chat.markers import marker_ids
from llmkit.model.config import ModelConfig
from llmkit.model.transformer import Transformer
from llmkit.training.data import Batch
from llmkit.training.loop import lm_loss


class Rendered(Protocol):
    ids: list[int]
    mask: list[bool] | list[float]  # True where the loss counts a token; or a weight per token (0: not at all)


class Example(Protocol):
    """Anything that renders to token ids with a loss mask (a course ``Conversation`` does)."""

    def render(self, tokenizer) -> Rendered: ...


ExampleSource = Callable[[int, str, int], Sequence[Example]]  # (n, split, seed) -> examples


def step_seed(seed: int, step: int) -> int:
    """A distinct data seed per step, so a batch is a pure function of (seed, step) (resumable)."""
    return seed * 1_000_003 + step


def pad_batch(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[bool] | Sequence[float]], *, pad_id: int,
              context_length: int) -> Batch:
    """Rows of ids and loss masks -> a ``Batch`` padded to the longest row.

    Targets are the ids shifted left by one; a target counts only where its mask is True, so pad
    positions (mask False) teach nothing. Masks that hold numbers are weights: the batch's mask is
    then float, and the loss a weighted mean (a weight of 3 counts a token three times). A row longer than ``context_length + 1`` ids is an error,
    never silently cut: a cut conversation would train the model on half an answer.
    """
    if not rows:
        raise ValueError("pad_batch got no rows; an example source returned an empty list")
    longest = max(len(r) for r in rows)
    if longest > context_length + 1:
        raise ValueError(f"a conversation has {longest} tokens but the model reads at most {context_length + 1} "
                         f"(context {context_length} + 1 target); shorten it or drop it from the data")
    width = longest - 1
    inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), pad_id, dtype=torch.long)
    weighted = any(not isinstance(w, bool) for trained in masks for w in trained)
    dtype = torch.float32 if weighted else torch.bool
    mask = torch.zeros((len(rows), width), dtype=dtype)
    for i, (ids, trained) in enumerate(zip(rows, masks)):
        n = len(ids) - 1
        inputs[i, :n] = torch.tensor(ids[:-1])
        targets[i, :n] = torch.tensor(ids[1:])
        mask[i, :n] = torch.tensor(trained[1:], dtype=dtype)
    return Batch(inputs, targets, mask)


def length_groups(conversations: Sequence[Example], tokenizer, context_length: int, groups: int) -> Batch | list[Batch]:
    """The batch sorted by length into ``groups`` groups, each padded only to its own longest row.

    A batch padded as one computes every row out to its longest conversation; in the course's skill
    data a third of that is padding. ``llmkit.training.loop.accumulate_gradients`` weighs the groups
    so the loss and gradients are those of the whole batch. ``groups=1`` is the plain padded batch.
    """
    if groups == 1:
        return conversation_batch(conversations, tokenizer, context_length)
    rendered = sorted((c.render(tokenizer) for c in conversations), key=lambda r: len(r.ids))
    size = -(-len(rendered) // groups)  # ceiling division: never more than ``groups`` groups
    pad_id = marker_ids(tokenizer)["endoftext"]
    return [pad_batch([r.ids for r in part], [r.mask for r in part], pad_id=pad_id, context_length=context_length)
            for part in (rendered[i:i + size] for i in range(0, len(rendered), size))]


def conversation_batch(conversations: Sequence[Example], tokenizer, context_length: int) -> Batch:
    """Render conversations with the chat template; the loss mask is the template's (assistant tokens)."""
    rendered = [c.render(tokenizer) for c in conversations]
    return pad_batch([r.ids for r in rendered], [r.mask for r in rendered],
                     pad_id=marker_ids(tokenizer)["endoftext"], context_length=context_length)


@torch.no_grad()
def masked_loss(model: Transformer, batches: Sequence[Batch]) -> float:
    """Mean loss per supervised token over held-out batches (the assistant's tokens only)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(device)
        n = float(batch.mask.sum())
        total += lm_loss(model(batch.inputs), batch.targets, batch.mask).item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Set every dropout probability in ``model`` to ``p``.

    Dropout lives in two forms: ``nn.Dropout`` modules, and plain float ``dropout`` attributes
    that attention hands to the fused SDPA kernel and the blocks to ``F.dropout``. Missing the
    second kind would leave dropout on while the config says it is off.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        elif isinstance(getattr(module, "dropout", None), float):
            module.dropout = p
    if isinstance(getattr(model, "config", None), ModelConfig):
        model.config = dataclasses.replace(model.config, dropout=p)
