"""What defines a model, and what it costs: ``ModelConfig`` and ``estimate_cost``.

A checkpoint's ``config.json`` is a ``ModelConfig`` as JSON; ``llmkit.model.transformer`` builds the network
from one. ``estimate_cost`` answers "how many FLOPs and how much KV-cache memory?" from the config
alone, before any weight exists.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from llmkit.checks import is_int

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
POSITIONS = ("learned", "rope")
# Far above any model this course (or a laptop) could load, and low enough that a damaged or hostile
# config.json is refused before it asks for terabytes.
LIMITS = {"vocab_size": 1 << 22, "context_length": 1 << 22, "d_model": 1 << 16, "n_layers": 1 << 10,
          "n_heads": 1 << 12, "n_kv_heads": 1 << 12, "d_ff": 1 << 20}


class InvalidConfig(ValueError, TypeError):
    """A config with wrong keys, types or values. One message lists every problem, whatever its
    kind, so the error is both a ValueError and a TypeError."""


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
            if is_int(value) and abs(value) < 1e300:  # a larger int is reported below, not an OverflowError
                object.__setattr__(self, name, float(value))
        problems = self._problems()
        if problems:
            raise InvalidConfig("invalid ModelConfig:\n  - " + "\n  - ".join(problems))

    def _problems(self) -> list[str]:
        problems = []
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            value = getattr(self, name)
            if not is_int(value) or value <= 0:
                problems.append(f"{name} must be a positive integer, got {value!r}")
            elif value > LIMITS[name]:
                problems.append(f"{name} is {value:,}, above the sane limit of {LIMITS[name]:,} (is the config "
                                "damaged? a larger model would not fit in memory anyway)")
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
        if not isinstance(self.rope_theta, float) or not math.isfinite(self.rope_theta) or self.rope_theta <= 0:
            problems.append(f"rope_theta must be a positive finite number, got {self.rope_theta!r}")
        if not isinstance(self.norm_eps, float) or not math.isfinite(self.norm_eps) or not 0 < self.norm_eps < 1:
            problems.append(f"norm_eps must be a small positive number (e.g. 1e-5), got {self.norm_eps!r}")
        if not isinstance(self.dropout, float) or not 0.0 <= self.dropout < 1.0:  # NaN fails this too
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
