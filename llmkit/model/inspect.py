"""Looking inside one forward pass: attention patterns, the residual stream, the logit lens,
and what each part is worth (ablation).

    with capture(model) as trace:
        model(ids)
    trace.attention[2]     # layer 2's attention pattern, (batch, heads, query, key); rows sum to 1
    trace.residual[2]      # the residual stream after block 2, (batch, time, d_model)
    trace.logit_lens()     # what each layer "would predict" if the model stopped there

    with ablate(model, mlp=[1]):
        model(ids)         # as if layer 1's feed-forward part added nothing to the residual stream
    ablation_effects(model, score)   # the score with each layer's attention, then MLP, removed
    mlp_neurons(model, ids, layer=0) # each feed-forward neuron's output at every position

Nothing in the model is edited: ``capture`` and ``ablate`` register PyTorch forward hooks and
remove them on exit. Outside ``capture`` there are no hooks, so inspecting costs nothing when unused. Inside, each
attention layer runs its explicit form (the fast kernel never materialises the pattern), and
``generate`` runs the modules rather than its fast decode path, so the hooks see every step.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

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


# --- ablation: remove one part and measure what it was worth ----------------------------------------

@contextmanager
def ablate(model: Transformer, attention: Iterable[int] = (), mlp: Iterable[int] = ()) -> Iterator[None]:
    """Inside the block, the listed layers' attention and/or MLP add zero to the residual stream.

    Each block computes ``x = x + attention(norm(x))`` then ``x = x + mlp(norm(x))``; a forward hook
    replaces the part's output with zeros, so the stream passes that part unchanged. The weights
    are not touched and the hooks are removed on exit, even after an error.
    """
    parts = {"attention": sorted(set(attention)), "mlp": sorted(set(mlp))}
    n_layers = len(model.blocks)
    for name, layers in parts.items():
        wrong = [i for i in layers if not 0 <= i < n_layers]
        if wrong:
            raise ValueError(f"{name} layers {wrong} do not exist: the model has layers 0 .. {n_layers - 1}")
    modules = [model.blocks[i].attn for i in parts["attention"]] + [model.blocks[i].mlp for i in parts["mlp"]]
    handles = [module.register_forward_hook(_output_zeros) for module in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _output_zeros(_module, _inputs, output: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(output)  # a forward hook that returns a value replaces the output


@dataclass
class Ablation:
    """A score (such as held-out loss) of the whole model, and with each part removed in turn."""

    baseline: float
    attention: list[float]  # the score with layer i's attention removed
    mlp: list[float]  # the score with layer i's MLP removed

    def increase(self, part: str) -> list[float]:
        """How much removing each layer's ``part`` ("attention" or "mlp") raised the score."""
        if part not in ("attention", "mlp"):
            raise ValueError(f'part must be "attention" or "mlp", got {part!r}')
        return [score - self.baseline for score in getattr(self, part)]


def ablation_effects(model: Transformer, score: Callable[[Transformer], float]) -> Ablation:
    """``score(model)`` as it is, then with each layer's attention and each layer's MLP ablated alone.

    ``score`` is any number where higher is worse, usually the loss on held-out text: the rise when
    a part is removed is how much the model relies on it (one part at a time; parts also work
    together, which removing two at once would show).
    """
    layers = range(len(model.blocks))
    with torch.no_grad():
        baseline = score(model)
        attention = [_score_without(model, score, attention=[i]) for i in layers]
        mlp = [_score_without(model, score, mlp=[i]) for i in layers]
    return Ablation(baseline, attention, mlp)


def _score_without(model: Transformer, score: Callable[[Transformer], float], **parts: list[int]) -> float:
    with ablate(model, **parts):
        return score(model)


# --- neurons: the feed-forward part's hidden units ---------------------------------------------------

def mlp_neurons(model: Transformer, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """How strongly each hidden unit ("neuron") of ``layer``'s MLP fires at every position of ``ids``.

    These are the values the MLP's last matrix (``down``) reads, shape (batch, time, d_ff): after
    the non-linearity (GELU, or SwiGLU's gate times its second projection). Neuron ``n``'s output
    adds ``value * down.weight[:, n]`` to the residual stream, so a large value is a loud neuron.
    """
    n_layers = len(model.blocks)
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} does not exist: the model has layers 0 .. {n_layers - 1}")
    seen: list[torch.Tensor] = []
    handle = model.blocks[layer].mlp.down.register_forward_pre_hook(lambda _module, inputs: seen.append(inputs[0]))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        handle.remove()
    return seen[0].detach()
