"""Looking inside one forward pass: attention patterns, the residual stream, the logit lens.

    with capture(model) as trace:
        model(ids)
    trace.attention[2]     # layer 2's attention pattern, (batch, heads, query, key); rows sum to 1
    trace.residual[2]      # the residual stream after block 2, (batch, time, d_model)
    trace.logit_lens()     # what each layer "would predict" if the model stopped there

Nothing in the model is edited: ``capture`` registers PyTorch forward hooks and removes them on
exit. Outside ``capture`` there are no hooks, so inspecting costs nothing when unused. Inside, each
attention layer runs its explicit form (the fast kernel never materialises the pattern), and
``generate`` runs the modules rather than its fast decode path, so the hooks see every step.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch

from llmkit.model.transformer import Transformer


@dataclass
class Activations:
    """What ``capture`` saw in the most recent forward pass (detached; a later pass overwrites it)."""

    model: Transformer
    embedding: torch.Tensor | None = None  # the residual stream before block 0, (batch, time, d_model)
    attention: list[torch.Tensor | None] = field(default_factory=list)
    residual: list[torch.Tensor | None] = field(default_factory=list)

    def logit_lens(self, position: int | None = None) -> torch.Tensor:
        """Read every layer's residual stream through the final norm and LM head.

        Returns logits of shape (n_layers, batch, time, vocab), or (n_layers, batch, vocab) for one
        ``position``. The last layer's are exactly the model's logits; earlier layers show how the
        prediction forms. Use ``.softmax(-1)`` for probabilities, ``.argmax(-1)`` for top tokens.
        """
        if not self.residual or any(r is None for r in self.residual):
            raise RuntimeError("nothing captured yet: call the model inside `with capture(model) as trace:`")
        stream = torch.stack(self.residual)  # (layers, batch, time, d_model)
        if position is not None:
            stream = stream[:, :, position]
        with torch.no_grad():
            return self.model.lm_head(self.model.norm(stream))


@contextmanager
def capture(model: Transformer) -> Iterator[Activations]:
    """Record the attention patterns, residual stream and embeddings of forward passes in the block."""
    n_layers = len(model.blocks)
    trace = Activations(model, attention=[None] * n_layers, residual=[None] * n_layers)

    def save_embedding(_module, inputs):
        trace.embedding = inputs[0].detach()

    def saver(store: list, index: int):
        def save(_module, _inputs, output):
            store[index] = output.detach()
        return save

    handles = [model.blocks[0].register_forward_pre_hook(save_embedding)]
    was_explicit = [block.attn.explicit for block in model.blocks]
    try:
        for i, block in enumerate(model.blocks):
            block.attn.explicit = True
            handles.append(block.attn.pattern.register_forward_hook(saver(trace.attention, i)))
            handles.append(block.register_forward_hook(saver(trace.residual, i)))
        yield trace
    finally:
        for handle in handles:
            handle.remove()
        for block, explicit in zip(model.blocks, was_explicit):
            block.attn.explicit = explicit
