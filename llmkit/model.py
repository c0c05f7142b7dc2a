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

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from llmkit.kvcache import KVCache

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
POSITIONS = ("learned", "rope")


def swiglu_hidden_size(d_model: int, multiple_of: int = 32) -> int:
    """SwiGLU has three matrices instead of two, so ~8/3 x d_model keeps the parameter count of 4 x."""
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


@dataclass(frozen=True)
class ModelConfig:
    """Every number and choice that defines a model; a checkpoint's ``config.json`` is this, as JSON.

    The defaults are the GPT-2 choices; ``ModelConfig.llama(...)`` gives the Llama ones. ``n_kv_heads``
    (grouped-query attention: several query heads share one key/value head) defaults to ``n_heads``,
    and ``d_ff`` to the family's usual MLP width.
    """

    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None
    d_ff: int | None = None
    norm: str = "layernorm"
    mlp: str = "gelu"  # "gelu" is GPT-2's tanh-approximated GELU
    positions: str = "learned"
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    bias: bool = True
    tie_embeddings: bool = True
    dropout: float = 0.0

    def __post_init__(self) -> None:
        # Fill the family defaults (frozen dataclass, hence object.__setattr__), then check.
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_ff is None and isinstance(self.d_model, int):
            d_ff = swiglu_hidden_size(self.d_model) if self.mlp == "swiglu" else 4 * self.d_model
            object.__setattr__(self, "d_ff", d_ff)
        for name in ("rope_theta", "norm_eps", "dropout"):  # JSON may give 10000 for 10000.0
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        problems = self._problems()
        if problems:
            raise ValueError("invalid ModelConfig:\n  - " + "\n  - ".join(problems))

    def _problems(self) -> list[str]:
        problems = []
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if problems:
            return problems  # the divisibility checks below need integers
        if self.d_model % self.n_heads:
            problems.append(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}): "
                            "each head gets d_model / n_heads dimensions")
        if self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}): "
                            "each key/value head serves an equal group of query heads")
        for name, allowed in (("norm", NORMS), ("mlp", MLPS), ("positions", POSITIONS)):
            if getattr(self, name) not in allowed:
                problems.append(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.positions == "rope" and not self.d_model % self.n_heads and self.head_dim % 2:
            problems.append(f"positions='rope' needs an even head_dim (d_model / n_heads = {self.head_dim}): "
                            "RoPE rotates pairs of dimensions")
        if not isinstance(self.rope_theta, float) or self.rope_theta <= 0:
            problems.append(f"rope_theta must be a positive number, got {self.rope_theta!r}")
        if not isinstance(self.norm_eps, float) or self.norm_eps <= 0:
            problems.append(f"norm_eps must be a positive number, got {self.norm_eps!r}")
        if not isinstance(self.dropout, float) or not 0.0 <= self.dropout < 1.0:
            problems.append(f"dropout must be in [0, 1), got {self.dropout!r}")
        for name in ("bias", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        return problems

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def family(self) -> str:
        """'gpt2', 'llama', or 'custom' for a mix of the two."""
        if (self.norm, self.mlp, self.positions) == ("layernorm", "gelu", "learned"):
            return "gpt2"
        if (self.norm, self.mlp, self.positions) == ("rmsnorm", "swiglu", "rope"):
            return "llama"
        return "custom"

    @classmethod
    def gpt2(cls, *, vocab_size: int, context_length: int, d_model: int, n_layers: int, n_heads: int,
             **overrides: Any) -> ModelConfig:
        """GPT-2 (2019): LayerNorm, GELU MLP, learned positions, biases, tied embeddings."""
        return cls(vocab_size=vocab_size, context_length=context_length, d_model=d_model,
                   n_layers=n_layers, n_heads=n_heads, **overrides)

    @classmethod
    def llama(cls, *, vocab_size: int, context_length: int, d_model: int, n_layers: int, n_heads: int,
              **overrides: Any) -> ModelConfig:
        """Llama (2023-): RMSNorm, SwiGLU MLP, rotary positions, no biases. Embeddings are tied by
        default, as in the small Llama 3.2 models; pass ``tie_embeddings=False`` for the large ones."""
        family = dict(norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, tie_embeddings=True)
        return cls(vocab_size=vocab_size, context_length=context_length, d_model=d_model,
                   n_layers=n_layers, n_heads=n_heads, **{**family, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown ModelConfig field(s) {unknown}; expected some of {sorted(fields)}")
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.default is dataclasses.MISSING and f.name not in data)
        if missing:
            raise ValueError(f"ModelConfig is missing required field(s) {missing}")
        return cls(**data)


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
        self.split = [self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, self.n_kv_heads * self.head_dim]
        self.qkv = nn.Linear(config.d_model, sum(self.split), bias=config.bias)  # q, k, v in one matmul
        self.out = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = config.dropout
        self.out_dropout = nn.Dropout(config.dropout)
        self.pattern = nn.Identity()
        self.explicit = False

    def forward(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None) -> torch.Tensor:
        batch, time, _ = x.shape
        q, k, v = self.qkv(x).split(self.split, dim=-1)
        q = q.view(batch, time, self.n_heads, self.head_dim).transpose(1, 2)  # (B, heads, T, head_dim)
        k = k.view(batch, time, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, time, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:  # keys/values of positions [0, start + time): the past plus ours
            k, v = cache.update(self.layer_index, start, k, v)
            k, v = k.to(q.dtype), v.to(q.dtype)  # a no-op unless autocast changed q's dtype
        y = self.explicit_attention(q, k, v) if self.explicit else self.fast_attention(q, k, v)
        y = y.transpose(1, 2).reshape(batch, time, -1)  # heads side by side again
        return self.out_dropout(self.out(y))

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
        self.mlp_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), start, rope, cache)
        return x + self.mlp_dropout(self.mlp(self.mlp_norm(x)))


# --- the model -----------------------------------------------------------------------------------

class Transformer(nn.Module):
    """ids (batch, time) -> logits (batch, time, vocab): a score for every possible next token."""

    def __init__(self, config: ModelConfig, device: torch.device | str | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_embed = nn.Embedding(config.context_length, config.d_model) if config.positions == "learned" else None
        self.embed_dropout = nn.Dropout(config.dropout)
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
        x = self.embed(ids)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[start:end]
        x = self.embed_dropout(x)
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
        low, high = torch.aminmax(ids)
        if low < 0 or high >= self.config.vocab_size:
            bad = int(low) if low < 0 else int(high)
            raise ValueError(f"token id {bad} is outside the vocabulary (0 .. {self.config.vocab_size - 1}); "
                             "was the text encoded with a different tokenizer?")
        return ids.size(0), ids.size(1)

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


# --- what a model costs --------------------------------------------------------------------------

@dataclass(frozen=True)
class CostEstimate:
    """Compute and memory of one model at one context length (a multiply-add counts as 2 FLOPs).

    ``decode_flops_per_token`` is for one new token that attends to ``context_length`` positions;
    ``prefill_flops`` for reading a whole ``context_length`` prompt at once. The weights' share
    grows linearly with length, attention's share quadratically (prefill) or linearly (per token).
    """

    context_length: int
    params: int
    matmul_params: int
    decode_flops_per_token: int
    decode_attention_flops_per_token: int
    prefill_flops: int
    train_flops_per_token: int
    kv_cache_bytes_per_token: int
    kv_cache_bytes: int


def count_params(config: ModelConfig) -> int:
    """Parameter count from the config alone (equals ``Transformer(config).num_params()``)."""
    d, bias = config.d_model, config.bias
    kv = config.n_kv_heads * config.head_dim
    norm = d * (2 if config.norm == "layernorm" and bias else 1)
    attention = d * (d + 2 * kv) + d * d + (d + 2 * kv + d if bias else 0)
    n_mats = 3 if config.mlp == "swiglu" else 2
    mlp = n_mats * d * config.d_ff + ((n_mats - 1) * config.d_ff + d if bias else 0)
    embeddings = config.vocab_size * d + (config.context_length * d if config.positions == "learned" else 0)
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return embeddings + config.n_layers * (2 * norm + attention + mlp) + norm + head


def estimate_cost(config: ModelConfig, context_length: int | None = None, *, batch_size: int = 1,
                  dtype: torch.dtype = torch.float32) -> CostEstimate:
    """FLOPs and KV-cache bytes for ``config`` at ``context_length`` tokens (default: the maximum)."""
    n = config.context_length if context_length is None else context_length
    d, kv_width = config.d_model, config.n_kv_heads * config.head_dim
    n_mats = 3 if config.mlp == "swiglu" else 2
    per_layer = d * (d + 2 * kv_width) + d * d + n_mats * d * config.d_ff
    matmul_params = config.n_layers * per_layer + config.vocab_size * d  # + LM head; lookups are free
    attention_per_key = 2 * 2 * config.n_layers * config.n_heads * config.head_dim  # q.k and weights.v
    bytes_per_token = 2 * config.n_layers * kv_width * torch.empty((), dtype=dtype).element_size()
    forward_total = 2 * matmul_params * n + attention_per_key * n * (n + 1) // 2  # token i sees i keys
    return CostEstimate(
        context_length=n,
        params=count_params(config),
        matmul_params=matmul_params,
        decode_flops_per_token=2 * matmul_params + attention_per_key * n,
        decode_attention_flops_per_token=attention_per_key * n,
        prefill_flops=forward_total,
        train_flops_per_token=3 * forward_total // max(n, 1),  # backward ~ 2 x forward
        kv_cache_bytes_per_token=bytes_per_token,
        kv_cache_bytes=bytes_per_token * n * batch_size,
    )
