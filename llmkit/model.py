"""The transformer: token ids in, next-token logits out, for the GPT-2 and Llama families.

Both families share one skeleton (embed -> N pre-norm blocks -> final norm -> LM head) and differ
only in four choices, all fields of ``ModelConfig``:

    norm       LayerNorm (GPT-2)            | RMSNorm (Llama)
    mlp        GELU, 4 x d_model (GPT-2)    | SwiGLU, ~8/3 x d_model (Llama)
    positions  learned table added at input | rotary (RoPE) applied to queries and keys
    bias       biases on every Linear       | no biases

The whole model is in this file. Saving, loading and importing Hugging Face weights live in
``llmkit.weights``; the KV cache in ``llmkit.kvcache``; looking inside in ``llmkit.inspect``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from llmkit.config import ModelConfig
from llmkit.config import CostEstimate, count_params, estimate_cost  # noqa: F401 (re-exported for older imports)
from llmkit.kvcache import KVCache


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout, skipped entirely when it would do nothing (eval mode or p = 0): even a no-op call
    costs microseconds, and a decode step would pay them three times per layer."""
    return F.dropout(x, p, training=True) if training and p > 0 else x


# --- attention -----------------------------------------------------------------------------------

def rope_tables(head_dim: int, context_length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
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


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """True where query i may look at key j. The queries are the *last* n_queries positions, so
    query i sits at position n_keys - n_queries + i and sees every key up to and including it."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=n_keys - n_queries)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads, in a fast and an explicit form.

    The fast form calls ``scaled_dot_product_attention`` (fused kernels, never builds the T x T
    matrix); the explicit form spells out scores -> mask -> softmax -> weighted sum, and passes the
    attention pattern through ``self.pattern`` (an identity) so ``llmkit.inspect`` can hook it.
    Set ``explicit = True`` to use it; both give the same result.
    """

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index  # which slot of the KV cache is ours
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        n_qkv_heads = self.n_heads + 2 * self.n_kv_heads
        self.qkv = nn.Linear(config.d_model, n_qkv_heads * self.head_dim, bias=config.bias)  # q, k, v in one matmul
        self.out = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = config.dropout
        self.pattern = nn.Identity()
        self.explicit = False

    def forward(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None) -> torch.Tensor:
        batch, time, _ = x.shape
        # One matmul makes every head's q, k and v; one view and one transpose lay them out as
        # (B, q + k + v heads, T, head_dim), and the split into q, k, v costs no copy.
        qkv = self.qkv(x).view(batch, time, -1, self.head_dim).transpose(1, 2)
        n_qk = self.n_heads + self.n_kv_heads
        if rope is not None:  # queries and keys are rotated together, in one call
            q, k = apply_rope(qkv[:, :n_qk], *rope).split((self.n_heads, self.n_kv_heads), dim=1)
        else:
            q, k = qkv[:, :self.n_heads], qkv[:, self.n_heads:n_qk]
        v = qkv[:, n_qk:]
        if cache is not None:  # keys/values of positions [0, start + time): the past plus ours
            k, v = cache.update(self.layer_index, start, k, v)
            if k.dtype != q.dtype:  # autocast made q lower precision than the cache
                k, v = k.to(q.dtype), v.to(q.dtype)
        y = self.explicit_attention(q, k, v) if self.explicit else self.fast_attention(q, k, v)
        y = y.transpose(1, 2).reshape(batch, time, -1)  # heads side by side again
        return dropout(self.out(y), self.dropout, self.training)

    def fast_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n_queries, n_keys = q.size(-2), k.size(-2)
        dropout = self.dropout if self.training else 0.0
        grouped = self.n_kv_heads != self.n_heads
        if n_queries == 1 or n_queries == n_keys:  # one new token sees everything; or a plain causal square
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=n_queries > 1,
                                                  enable_gqa=grouped)
        mask = causal_mask(n_queries, n_keys, q.device)  # new tokens after a cached prefix
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, enable_gqa=grouped)

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

    def forward(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), start, rope, cache)
        return x + dropout(self.mlp(self.mlp_norm(x)), self.dropout, self.training)


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
        batch, time = self._check_ids(ids)
        start = (cache.length if cache is not None else 0) if start_pos is None else start_pos
        end = start + time
        if start < 0:
            raise ValueError(f"start_pos must be >= 0, got {start}")
        if end > self.config.context_length:
            raise ValueError(f"sequence too long: positions up to {end} (start {start} + {time} new tokens) "
                             f"but context_length is {self.config.context_length}; shorten the input "
                             "or drop the oldest tokens")
        if cache is not None:
            cache.check_write(start, time, batch)
        x = self._embed(ids)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[start:end]
        x = dropout(x, self.config.dropout, self.training)
        rope = (self.rope_cos[start:end], self.rope_sin[start:end]) if self.config.positions == "rope" else None
        for block in self.blocks:
            x = block(x, start, rope, cache)
        if cache is not None:
            cache.length = end
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))

    def _check_ids(self, ids: torch.Tensor) -> tuple[int, int]:
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int32):
            raise TypeError(f"ids must be an integer tensor (torch.long), got "
                            f"{ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__}")
        if ids.dim() != 2 or ids.size(1) == 0:
            raise ValueError(f"ids must have shape (batch, time) with time >= 1, got {tuple(ids.shape)}; "
                             "for a single sequence pass ids[None]")
        return ids.size(0), ids.size(1)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token vectors for ``ids``, with a clear error for an id outside the vocabulary.

        On the CPU the lookup checks every id itself (it raises IndexError), so a decode step pays
        nothing more; on a GPU a bad id is a device-side assert that kills the process, so there the
        ids are checked before the lookup."""
        if ids.device.type != "cpu":
            self._check_id_range(ids)
        try:
            return self.embed(ids)
        except IndexError:
            self._check_id_range(ids)
            raise

    def _check_id_range(self, ids: torch.Tensor) -> None:
        low, high = torch.aminmax(ids)
        if low < 0 or high >= self.config.vocab_size:
            bad = int(low) if low < 0 else int(high)
            raise ValueError(f"token id {bad} is outside the vocabulary (0 .. {self.config.vocab_size - 1}); "
                             "was the text encoded with a different tokenizer?")

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

    # Files: the code lives in llmkit.weights (one place for everything that touches disk).
    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``."""
        from llmkit import weights
        return weights.save(self, directory)

    @classmethod
    def load(cls, directory: str | Path, device: torch.device | str | None = None) -> Transformer:
        """Read a folder written by ``save`` (in eval mode)."""
        from llmkit import weights
        return weights.load(directory, device=device)

    @classmethod
    def from_hf(cls, model_or_dir: Any, device: torch.device | str | None = None) -> Transformer:
        """Import a Hugging Face ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` (object or saved folder)."""
        from llmkit import weights
        return weights.from_hf(model_or_dir, device=device)
