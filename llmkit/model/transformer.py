"""The transformer: token ids in, next-token logits out, for the GPT-2 and Llama families.

Both families share one skeleton (embed -> N pre-norm blocks -> final norm -> LM head) and differ
only in four choices, all fields of ``ModelConfig``:

    norm       LayerNorm (GPT-2)            | RMSNorm (Llama)
    mlp        GELU, 4 x d_model (GPT-2)    | SwiGLU, ~8/3 x d_model (Llama)
    positions  learned table added at input | rotary (RoPE) applied to queries and keys
    bias       biases on every Linear       | no biases

This file is the readable reference: the whole model, written to be read top to bottom. Its
neighbours in ``llmkit.model``: ``config`` (ModelConfig, cost estimates), ``kvcache``, ``weights``
(save, load, Hugging Face import), ``inspect`` (hooks) and ``fast``, the same inference maths as
plain tensor functions, which ``llmkit.generation.generate`` uses for decoding and which tests
prove equal to this file bit for bit.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from llmkit.model.config import ModelConfig
from llmkit.model.kvcache import KVCache

Rope = tuple[torch.Tensor, torch.Tensor]  # the cos and sin tables of the positions in play


# --- rotary positions ----------------------------------------------------------------------------

def rope_tables(head_dim: int, context_length: int, theta: float) -> Rope:
    """cos and sin of every (position, frequency) angle, shape (context_length, head_dim).

    Dimension pair (i, i + head_dim/2) turns by angle position * theta^(-2i/head_dim): fast turns
    for the first pairs, slow for the last. (This is the "rotate-half" layout Hugging Face Llama uses.)
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(context_length, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+d/2}) of x (..., time, head_dim) by its position's angle.

    After rotation the dot product of a query and a key depends only on their distance."""
    first, second = x.chunk(2, dim=-1)
    rotated_half = torch.cat((-second, first), dim=-1)
    return x * cos.to(x.dtype) + rotated_half * sin.to(x.dtype)


# --- attention -----------------------------------------------------------------------------------

def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """True where query i may look at key j. The queries are the *last* n_queries positions, so
    query i sits at position n_keys - n_queries + i and sees every key up to and including it."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=n_keys - n_queries)


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float = 0.0,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of the queries (the last positions) over all keys, in one fused kernel.

    One new token sees every key, and a prompt read from the start is a plain causal square; only
    new tokens after a cached prefix need ``causal_mask`` (made here unless ``mask`` is given)."""
    n_queries, n_keys = q.size(-2), k.size(-2)
    grouped = q.size(1) != k.size(1)  # fewer key/value heads than query heads
    if n_queries == 1 or n_queries == n_keys:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=n_queries > 1, enable_gqa=grouped)
    if mask is None:
        mask = causal_mask(n_queries, n_keys, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, enable_gqa=grouped)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads, in a fast and an explicit form.

    The fast form calls ``scaled_dot_product_attention`` (fused kernels, never builds the T x T
    matrix); the explicit form spells out scores -> mask -> softmax -> weighted sum, and passes the
    attention pattern through ``self.pattern`` (an identity) so ``llmkit.model.inspect`` can hook it.
    Set ``explicit = True`` to use it; both give the same result.
    """

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index  # which slot of the KV cache is ours
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.heads = (self.n_heads, self.n_kv_heads, self.n_kv_heads)  # query, key and value heads
        self.split = [n * self.head_dim for n in self.heads]  # q, k, v widths in qkv's output (to split by hand)
        self.qkv = nn.Linear(config.d_model, sum(self.heads) * self.head_dim, bias=config.bias)  # one matmul
        self.out = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = config.dropout
        self.pattern = nn.Identity()
        self.explicit = False

    def forward(self, x: torch.Tensor, start: int, rope: Rope | None, cache: KVCache | None) -> torch.Tensor:
        batch, time, _ = x.shape
        # every head side by side, (batch, all heads, time, head_dim), then cut into q, k and v
        heads = self.qkv(x).view(batch, time, -1, self.head_dim).transpose(1, 2)
        q, k, v = heads.split(self.heads, dim=1)
        if rope is not None:  # queries and keys turn by their positions' angles; values do not
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:  # keys/values of positions [0, start + time): the past plus ours
            k, v = cache.update(self.layer_index, start, k, v)
            if k.dtype != q.dtype:  # autocast made q lower precision than the cache
                k, v = k.to(q.dtype), v.to(q.dtype)
        y = self.explicit_attention(q, k, v) if self.explicit else self.fast_attention(q, k, v)
        y = y.transpose(1, 2).reshape(batch, time, -1)  # heads side by side again
        return F.dropout(self.out(y), self.dropout, self.training)

    def fast_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fused_attention(q, k, v, self.dropout if self.training else 0.0)

    def explicit_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # share kv heads
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, heads, T_query, T_key)
        scores = scores.masked_fill(~causal_mask(q.size(-2), k.size(-2), q.device), float("-inf"))
        pattern = self.pattern(scores.float().softmax(dim=-1).to(v.dtype))  # each row sums to 1
        pattern = F.dropout(pattern, self.dropout, self.training)
        return pattern @ v


# --- feed-forward and block ----------------------------------------------------------------------

class MLP(nn.Module):
    """GPT-2's feed-forward: widen, GELU, narrow back."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.up = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class SwiGLU(nn.Module):
    """Llama's feed-forward: a SiLU "gate" multiplies a second projection, then narrow back."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_up = nn.Linear(config.d_model, 2 * config.d_ff, bias=config.bias)  # gate and up in one matmul
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


def make_norm(config: ModelConfig) -> nn.Module:
    """LayerNorm re-centres and rescales each vector; RMSNorm only rescales: x / rms(x) * weight."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


class Block(nn.Module):
    """One layer: attention then MLP, each reading a normalised copy of the residual stream and
    adding its result back to it (pre-norm, as both GPT-2 and Llama do)."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.attn_norm = make_norm(config)
        self.attn = Attention(config, layer_index)
        self.mlp_norm = make_norm(config)
        self.mlp = SwiGLU(config) if config.mlp == "swiglu" else MLP(config)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, start: int, rope: Rope | None, cache: KVCache | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), start, rope, cache)
        return x + F.dropout(self.mlp(self.mlp_norm(x)), self.dropout, self.training)


# --- checking the input --------------------------------------------------------------------------

def embed_tokens(embed: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``embed(ids)``, with a clear error for an id outside the vocabulary.

    On the CPU the lookup checks every id itself (it raises IndexError), so the ids are only
    examined after a failure; on a GPU a bad id is a device-side assert that kills the process,
    so there they are checked before the lookup."""
    if not ids.is_cpu:
        check_token_ids(ids, vocab_size)
    try:
        return embed(ids)
    except IndexError:
        check_token_ids(ids, vocab_size)
        raise


def check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    low, high = torch.aminmax(ids)
    if low < 0 or high >= vocab_size:
        bad = int(low) if low < 0 else int(high)
        raise ValueError(f"token id {bad} is outside the vocabulary (0 .. {vocab_size - 1}); "
                         "was the text encoded with a different tokenizer?")


def check_positions(config: ModelConfig, ids: torch.Tensor, cache: KVCache | None, start_pos: int | None) -> int:
    """Check ``ids`` (batch, time) and where they go; return their first position.

    They continue the cached sequence (at ``cache.length`` unless ``start_pos`` says otherwise),
    must fit the context window, and with a cache must fit the cache."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int32):
        raise TypeError(f"ids must be an integer tensor (torch.long), got "
                        f"{ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__}")
    if ids.dim() != 2 or ids.size(1) == 0:
        raise ValueError(f"ids must have shape (batch, time) with time >= 1, got {tuple(ids.shape)}; "
                         "for a single sequence pass ids[None]")
    batch, time = ids.shape
    start = (cache.length if cache is not None else 0) if start_pos is None else start_pos
    if start < 0:
        raise ValueError(f"start_pos must be >= 0, got {start}")
    if start + time > config.context_length:
        raise ValueError(f"sequence too long: positions up to {start + time} (start {start} + {time} new tokens) "
                         f"but context_length is {config.context_length}; shorten the input "
                         "or drop the oldest tokens")
    if cache is not None:
        cache.check_write(start, time, batch)
    return start


# --- the model -----------------------------------------------------------------------------------

class Transformer(nn.Module):
    """ids (batch, time) -> logits (batch, time, vocab): a score for every possible next token."""

    def __init__(self, config: ModelConfig, device: torch.device | str | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_embed = nn.Embedding(config.context_length, config.d_model) if config.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm = make_norm(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.positions == "rope":  # computed once, not saved (non-persistent), moved by .to()
            cos, sin = rope_tables(config.head_dim, config.context_length, config.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        for block in self.blocks:  # keep the residual stream's variance from growing with depth
            for layer in (block.attn.out, block.mlp.down):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * config.n_layers))
        if config.tie_embeddings:  # the output layer reuses the input table: one tensor, no copy
            self.lm_head.weight = self.embed.weight
        if device is not None:
            self.to(device)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None, start_pos: int | None = None, *,
                last_only: bool = False) -> torch.Tensor:
        """Logits for every position of ``ids``, or only the last one with ``last_only=True``
        (all that generation needs after a prefill).

        With a ``cache``, ``ids`` continue the cached sequence: they sit at positions
        ``[start_pos, start_pos + time)`` (``start_pos`` defaults to ``cache.length``), their keys and
        values are written into the cache, and ``cache.length`` becomes ``start_pos + time``.
        """
        start = check_positions(self.config, ids, cache, start_pos)
        end = start + ids.size(1)
        x = embed_tokens(self.embed, ids, self.config.vocab_size)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[start:end]
        x = F.dropout(x, self.config.dropout, self.training)
        rope = (self.rope_cos[start:end], self.rope_sin[start:end]) if self.config.positions == "rope" else None
        for block in self.blocks:
            x = block(x, start, rope, cache)
        if cache is not None:
            cache.length = end
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))

    def step(self, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One decode step: logits (batch, vocab) for one new token per sequence, ``ids`` (batch,),
        right after the ``cache.length`` cached positions; a forward pass over one token."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
            raise ValueError(f"step takes one new token per sequence, shape (batch,), got "
                             f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}; "
                             "for several new tokens call the model: model(ids, cache=cache)")
        return self(ids[:, None], cache=cache)[:, -1]

    def new_cache(self, batch_size: int = 1, max_length: int | None = None,
                  dtype: torch.dtype | None = None) -> KVCache:
        """An empty KV cache on this model's device, in its dtype unless told otherwise."""
        weight = self.embed.weight
        return KVCache(self.config, batch_size, max_length, device=weight.device, dtype=dtype or weight.dtype)

    def num_params(self, include_embeddings: bool = True) -> int:
        """Number of parameters (a tied LM head counts once). ``include_embeddings=False`` leaves out
        the token and position tables, the convention in scaling-law plots."""
        total = sum(p.numel() for p in self.parameters())
        if not include_embeddings:
            total -= self.embed.weight.numel() + (self.pos_embed.weight.numel() if self.pos_embed is not None else 0)
        return total

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device
