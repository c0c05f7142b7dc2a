"""The KV cache: every layer's keys and values for the positions already processed.

Generating token t needs the keys and values of positions 0..t-1 in every layer. Without a cache
the model recomputes all of them for every new token (quadratic work); with one, each step
computes only the new token's and appends them. The cache is allocated once, at full size, and
filled in place: no re-allocation or concatenation while decoding.

Each layer holds two tensors of shape (batch, n_kv_heads, max_length, head_dim). Grouped-query
models store only their n_kv_heads, which is where their memory saving comes from.
"""
from __future__ import annotations

from typing import Any

import torch


class KVCache:
    """Preallocated per-layer keys and values; ``length`` positions of them are filled.

    ``config`` is any object with ``n_layers``, ``n_kv_heads``, ``head_dim`` and ``context_length``
    (a ``ModelConfig``). The model writes into the cache and advances ``length``; you read
    ``length`` and ``nbytes``, and rewind with ``reset()`` or ``truncate(n)``.
    """

    def __init__(self, config: Any, batch_size: int = 1, max_length: int | None = None, *,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        max_length = config.context_length if max_length is None else max_length
        if not 0 < max_length <= config.context_length:
            raise ValueError(f"max_length ({max_length}) must be between 1 and the model's "
                             f"context_length ({config.context_length})")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        shape = (config.n_layers, batch_size, config.n_kv_heads, max_length, config.head_dim)
        # One tensor for every layer's keys (and one for values), so that a whole prefix can be
        # copied in at once (llmkit.generation.prefix_cache); ``keys[layer]`` is a view of one layer. The
        # memory is left uninitialised: only the first ``length`` positions are ever read, and they
        # are written first, so zero-filling it would be wasted work on every request.
        self.key_table = torch.empty(shape, device=device, dtype=dtype)
        self.value_table = torch.empty(shape, device=device, dtype=dtype)
        self.keys = [self.key_table[layer] for layer in range(config.n_layers)]
        self.values = [self.value_table[layer] for layer in range(config.n_layers)]
        self.length = 0

    @property
    def batch_size(self) -> int:
        return self.keys[0].size(0)

    @property
    def max_length(self) -> int:
        return self.keys[0].size(2)

    @property
    def nbytes(self) -> int:
        """Memory the cache occupies (all of it is allocated up front)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def check_write(self, start: int, time: int, batch: int) -> None:
        """Raise if ``time`` new positions from ``start`` cannot go into this cache."""
        if batch != self.batch_size:
            raise ValueError(f"batch of {batch} sequences but the cache holds {self.batch_size}; "
                             "make a cache with the same batch_size")
        if start > self.length:
            raise ValueError(f"start_pos {start} is past the cached length {self.length}: "
                             f"positions {self.length}..{start - 1} would be missing")
        if start + time > self.max_length:
            raise ValueError(f"cache full: positions up to {start + time} (start {start} + {time} new tokens) "
                             f"but the cache's max_length is {self.max_length}")

    def update(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``, ``v`` (batch, n_kv_heads, time, head_dim) at positions [start, start + time)
        of ``layer``; return that layer's keys and values for all positions [0, start + time)."""
        keys, values, time = self.keys[layer], self.values[layer], k.size(2)
        keys.narrow(2, start, time).copy_(k)  # narrow: a view of positions [start, start + time)
        values.narrow(2, start, time).copy_(v)
        return keys.narrow(2, 0, start + time), values.narrow(2, 0, start + time)

    def reset(self) -> None:
        """Forget everything (the memory stays allocated for the next sequence)."""
        self.length = 0

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions, e.g. a shared prompt prefix, and drop the rest."""
        if not 0 <= length <= self.length:
            raise ValueError(f"can only truncate to 0..{self.length} positions, got {length}")
        self.length = length

    def __repr__(self) -> str:
        b, h, n, d = self.keys[0].shape
        return (f"KVCache(layers={len(self.keys)}, batch={b}, kv_heads={h}, head_dim={d}, "
                f"length={self.length}/{n}, {self.nbytes / 2**20:.2f} MiB)")
