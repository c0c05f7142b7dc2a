"""Make a trained model deeper (and its window longer) without changing what it computes.

Why: some circuits start far sooner in a shallow model. On copy practice, a 2-layer model leaves
the loss plateau of the copying circuit (an "induction head": find the earlier occurrence of the
current token, predict what followed it) while a 6-layer model of the same width sits on it for a
thousand steps and more; grown from a 2-layer model that has started to leave it, the 6-layer
model finishes the circuit within a few hundred steps (``data/models/recipe/README.md`` has the
measurements). So the recipe starts the circuit shallow, then grows the model: each new block's
two output projections (attention's ``out`` and the MLP's ``down``) start at zero, so the block
adds nothing to the residual stream and the grown model's logits equal the shallow model's
exactly. Training then finds a use for the new blocks while the circuit keeps working (Gong et
al., 2019, grew BERT by stacking for the same reason: a trained shallow model is a good start).
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from llmkit.model.config import ModelConfig
from llmkit.model.transformer import Transformer

#: what may differ between a model and its grown version; everything else must match
GROWABLE = ("n_layers", "context_length")


def grow(model: Transformer, n_layers: int, context_length: int | None = None) -> Transformer:
    """A copy of ``model`` with ``n_layers`` blocks (the new ones appended on top, as identities).

    ``context_length`` may grow too for rotary positions (they are relative: nothing was learned
    per position); learned position tables cannot be extended without training new rows, so a
    GPT-2-style model keeps its window.
    """
    old = model.config
    context_length = old.context_length if context_length is None else context_length
    if n_layers < old.n_layers:
        raise ValueError(f"grow adds layers: the model has {old.n_layers}, asked for {n_layers}; "
                         f"to make a smaller model, train one")
    if context_length < old.context_length:
        raise ValueError(f"grow keeps or lengthens the window: the model has {old.context_length} positions, "
                         f"asked for {context_length}")
    if context_length != old.context_length and old.positions != "rope":
        raise ValueError(f"a model with {old.positions!r} positions has one learned row per position, so its "
                         f"window ({old.context_length}) cannot grow; use positions='rope' or keep the window")
    config = dataclasses.replace(old, n_layers=n_layers, context_length=context_length)
    grown = Transformer(config, device=next(model.parameters()).device)
    state = grown.state_dict()
    state.update(model.state_dict())  # every tensor of the old model, by name; the new blocks stay as made
    grown.load_state_dict(state)
    for block in grown.blocks[old.n_layers:]:
        for projection in (block.attn.out, block.mlp.down):
            nn.init.zeros_(projection.weight)  # the block writes nothing into the residual stream yet
            if projection.bias is not None:
                nn.init.zeros_(projection.bias)
    return grown


def growable(small: ModelConfig, large: ModelConfig) -> list[str]:
    """What stops ``small`` from growing into ``large`` (an empty list when nothing does)."""
    found = [f"{field.name}: {getattr(small, field.name)!r} vs {getattr(large, field.name)!r}"
             for field in dataclasses.fields(ModelConfig)
             if field.name not in GROWABLE and getattr(small, field.name) != getattr(large, field.name)]
    if large.n_layers < small.n_layers:
        found.append(f"n_layers: {small.n_layers} cannot shrink to {large.n_layers}")
    if large.context_length < small.context_length:
        found.append(f"context_length: {small.context_length} cannot shrink to {large.context_length}")
    elif large.context_length != small.context_length and small.positions != "rope":
        found.append(f"context_length: learned positions cannot grow from {small.context_length}")
    return found


@torch.no_grad()
def same_logits(a: Transformer, b: Transformer, ids: torch.Tensor, atol: float = 1e-5) -> bool:
    """Whether two models give the same logits on ``ids`` (a grown model must, before training)."""
    return bool(torch.allclose(a(ids), b(ids), atol=atol))
