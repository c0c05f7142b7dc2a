"""The fast decode path: the Transformer's inference maths as plain tensor functions.

A decode step of a small model multiplies one vector by small matrices, and each ``nn.Module``
call around them (hook checks, attribute lookups, argument parsing) costs about as much as the
arithmetic; a block makes nine such calls. ``FastModel`` computes what ``Transformer.forward``
computes with a KV cache, with the same ops in the same order, so the logits are equal bit for
bit (the tests prove it for both families, prefills, decode steps and chunks after a cached
prefix), but it looks every weight up once, when it is built.

With the default ``plain_linear`` it reads the model's own parameters (no copy), so it sees
in-place weight changes (a packed ``linear``, as the server uses, copies them), but it skips
everything only modules have. That gives the rule ``fast_path`` applies:

    the fast path is used unless the model is in training mode, a module has a forward hook
    (or a global forward hook is set), an attention layer is in its explicit form, or a layer
    was swapped for a module of a kind this file does not know.

``llmkit.generation.generate`` checks the rule once per request, at its start; a hook added or a
layer swapped while a request runs takes effect from the next request.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as torch_module

from llmkit.model.kvcache import KVCache
from llmkit.model.transformer import (MLP, Attention, Block, Rope, SwiGLU, Transformer, apply_rope, causal_mask,
                                      check_positions, embed_tokens, fused_attention)

# the module kinds FastModel implements; anything else (a swapped-in layer) needs the modules
KNOWN_KINDS = frozenset({Transformer, nn.Embedding, nn.ModuleList, Block, Attention, MLP, SwiGLU, nn.Linear,
                         nn.LayerNorm, nn.RMSNorm, nn.Identity})


def why_not_fast(model: Transformer) -> str | None:
    """Why ``model`` must run as modules, or None when the fast path computes the same thing.

    PyTorch has no public way to list hooks, so this reads the same hook tables that
    ``nn.Module.__call__`` reads before every call."""
    if model.training:
        return "the model is in training mode"
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return "a global forward hook is registered"
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return f"module {name or 'model'!r} has a forward hook"
        if type(module) not in KNOWN_KINDS:
            return f"module {name!r} is a {type(module).__name__}, which the fast path does not implement"
        if isinstance(module, Attention) and module.explicit:
            return f"attention {name!r} is in its explicit form"
    return None


def fast_path(model: Transformer) -> FastModel | None:
    """A ``FastModel`` for ``model``, or None when the rule in this module's docstring says no."""
    return FastModel(model) if why_not_fast(model) is None else None


Linear = Callable[[torch.Tensor], torch.Tensor]


def plain_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
    """``x -> F.linear(x, weight, bias)`` on the module's own weights: what ``nn.Linear`` computes."""
    return functools.partial(F.linear, weight=weight, bias=bias)


def norm_function(norm: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A LayerNorm or RMSNorm module as a plain function of x, with the same weights.

    It calls the kernels ``F.layer_norm`` and ``F.rms_norm`` call, without their Python checks."""
    if isinstance(norm, nn.RMSNorm):
        return functools.partial(torch.rms_norm, normalized_shape=norm.normalized_shape, weight=norm.weight,
                                 eps=norm.eps)
    return functools.partial(torch.layer_norm, normalized_shape=norm.normalized_shape, weight=norm.weight,
                             bias=norm.bias, eps=norm.eps)


class FastBlock:
    """``Block.forward`` in inference (no dropout, with a KV cache), as functions of its weights.

    ``linear`` makes each linear layer's function from its weight and bias; ``plain_linear``
    (the default) is what makes the path equal to the modules bit for bit."""

    def __init__(self, block: Block, linear: Callable[..., Linear] = plain_linear):
        attn, mlp = block.attn, block.mlp
        self.attn_norm, self.mlp_norm = norm_function(block.attn_norm), norm_function(block.mlp_norm)
        self.layer_index, self.head_dim, self.heads = attn.layer_index, attn.head_dim, attn.heads
        self.qkv, self.out = linear(attn.qkv.weight, attn.qkv.bias), linear(attn.out.weight, attn.out.bias)
        self.swiglu = isinstance(mlp, SwiGLU)
        up = mlp.gate_up if self.swiglu else mlp.up
        self.up, self.down = linear(up.weight, up.bias), linear(mlp.down.weight, mlp.down.bias)

    def __call__(self, x: torch.Tensor, start: int, rope: Rope | None, cache: KVCache,
                 mask: torch.Tensor | None) -> torch.Tensor:
        """Several new tokens per sequence. ``mask`` is the ``causal_mask`` of new tokens after a
        cached prefix (None for a plain causal square), made once for all the layers."""
        batch, time, _ = x.shape
        heads = self.qkv(self.attn_norm(x)).view(batch, time, -1, self.head_dim).transpose(1, 2)
        q, k, v = self.rotate(heads, rope)
        k, v = cache.update(self.layer_index, start, k, v)
        if k.dtype != q.dtype:
            k, v = k.to(q.dtype), v.to(q.dtype)
        y = fused_attention(q, k, v, mask=mask).transpose(1, 2).reshape(batch, time, -1)
        return self.feed_forward(x + self.out(y))

    def step(self, x: torch.Tensor, position: int, rope: Rope | None, cache: KVCache) -> torch.Tensor:
        """``__call__`` for one new token per sequence, on rows (batch, width). With one position the
        heads come straight out of a view: no transpose or reshape back. Same ops otherwise."""
        batch = x.size(0)
        heads = self.qkv(self.attn_norm(x)).view(batch, -1, 1, self.head_dim)  # (B, all heads, 1, hd)
        q, k, v = self.rotate(heads, rope)
        keys, values = cache.update(self.layer_index, position, k, v)
        if keys.dtype != q.dtype:
            keys, values = keys.to(q.dtype), values.to(q.dtype)
        y = F.scaled_dot_product_attention(q, keys, values, enable_gqa=q.size(1) != k.size(1)).view(batch, -1)
        return self.feed_forward(x + self.out(y))

    def rotate(self, heads: torch.Tensor, rope: Rope | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v from every head side by side, queries and keys rotated (one call for both)."""
        if rope is None:
            return heads.split_with_sizes(self.heads, dim=1)
        n_q, n_kv, _ = self.heads
        q, k = apply_rope(heads[:, :n_q + n_kv], *rope).split_with_sizes((n_q, n_kv), dim=1)
        return q, k, heads[:, n_q + n_kv:]

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The residual MLP half of the block."""
        h = self.up(self.mlp_norm(x))
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.down(h)


class FastModel:
    """``Transformer.forward`` with a KV cache in inference, built from FastBlocks.

    Build one per request with ``fast_path(model)``: building checks nothing itself, so a model
    that ``why_not_fast`` refuses would silently lose its hooks or swapped layers here. ``linear``
    as in ``FastBlock`` (the server passes ``llmkit.serve.packed.packed_linear``)."""

    def __init__(self, model: Transformer, linear: Callable[..., Linear] = plain_linear):
        self.config = model.config
        # torch.embedding is the kernel F.embedding calls, without its Python wrapper
        self.embed = functools.partial(torch.embedding, model.embed.weight)
        self.pos_embed = model.pos_embed.weight if model.pos_embed is not None else None
        self.rope = (model.rope_cos, model.rope_sin) if model.config.positions == "rope" else None
        self.blocks = [FastBlock(block, linear) for block in model.blocks]
        self.norm, self.head = norm_function(model.norm), linear(model.lm_head.weight, None)

    def __call__(self, ids: torch.Tensor, cache: KVCache, start_pos: int | None = None, *,
                 last_only: bool = False) -> torch.Tensor:
        """``Transformer.forward(ids, cache, start_pos, last_only=...)``, the same checks included."""
        start = check_positions(self.config, ids, cache, start_pos)
        if ids.size(1) == 1:  # one new token per sequence: a decode step
            return self.step_at(ids[:, 0], start, cache).unsqueeze(1)
        end = start + ids.size(1)
        x = embed_tokens(self.embed, ids, self.config.vocab_size)
        if self.pos_embed is not None:
            x = x + self.pos_embed[start:end]
        rope = (self.rope[0][start:end], self.rope[1][start:end]) if self.rope is not None else None
        mask = causal_mask(ids.size(1), end, x.device) if start > 0 else None  # one for every layer
        for block in self.blocks:
            x = block(x, start, rope, cache, mask)
        cache.length = end
        if last_only:
            x = x[:, -1:]
        return self.head(self.norm(x))

    def step(self, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """``Transformer.step``: logits (batch, vocab) for one new token per sequence, ``ids`` (batch,),
        right after the ``cache.length`` cached positions. The checks are a few comparisons; the
        full messages come from ``check_positions`` only when one fails."""
        position = cache.length
        if ids.dim() != 1 or ids.size(0) != cache.batch_size or position >= cache.max_length:
            if ids.dim() != 1:
                raise ValueError(f"step takes one new token per sequence, shape (batch,), got {tuple(ids.shape)}; "
                                 "for several new tokens call the model: model(ids, cache=cache)")
            check_positions(self.config, ids[:, None], cache, position)
        return self.step_at(ids, position, cache)

    def step_at(self, ids: torch.Tensor, position: int, cache: KVCache) -> torch.Tensor:
        """The decode step itself, ``ids`` (batch,) at ``position``, unchecked."""
        x = embed_tokens(self.embed, ids, self.config.vocab_size)
        if self.pos_embed is not None:
            x = x + self.pos_embed[position]
        rope = None
        if self.rope is not None:
            rope = (self.rope[0][position:position + 1], self.rope[1][position:position + 1])
        for block in self.blocks:
            x = block.step(x, position, rope, cache)
        cache.length = position + 1
        return self.head(self.norm(x))
