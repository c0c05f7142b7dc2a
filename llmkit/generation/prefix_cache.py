"""Prompt caching across requests: reuse the keys and values of a prompt prefix seen before.

Within one request the KV cache (llmkit.model.kvcache) saves every decode step from recomputing earlier
tokens. ``PrefixCache`` carries the same idea across requests: a chat harness re-sends the whole
history every turn, so a new request usually starts with tokens a previous request already
prefilled. Their keys and values are copied in instead of recomputed, and only the new tail is
prefilled. ``llmkit.generation.generate`` takes one as ``prefix_cache=``; it never changes the result.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import torch

from llmkit.checks import check_int
from llmkit.model.kvcache import KVCache
from llmkit.model.transformer import Transformer

SAMPLES_PER_TENSOR = 256  # numbers of each parameter compared to notice changed weights


@dataclass(frozen=True)
class PrefixCacheStats:
    """Counters since the cache was made (or cleared). ``hit_rate`` is the share of prompt tokens
    that were served from the cache rather than prefilled."""

    requests: int
    hits: int  # requests that reused at least one token
    cached_tokens: int
    prefilled_tokens: int
    evictions: int
    blocks: int
    nbytes: int

    @property
    def misses(self) -> int:
        return self.requests - self.hits

    @property
    def hit_rate(self) -> float:
        total = self.cached_tokens + self.prefilled_tokens
        return self.cached_tokens / total if total else 0.0


class _Block:
    """Up to ``block_size`` tokens and their keys and values, (n_layers, n_kv_heads, tokens, head_dim)
    each. A block hangs under the block before it, so it is only found after that exact prefix.
    Only whole blocks have children; a shorter block is the tail of a stored sequence."""

    __slots__ = ("tokens", "parent", "children", "keys", "values")

    def __init__(self, tokens: tuple[int, ...], parent: _Block | None, keys=None, values=None):
        self.tokens, self.parent, self.children = tokens, parent, {}
        self.keys, self.values = keys, values


def _shared_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """Prompt caching: keep the keys and values of prompts seen before and reuse the longest match.

    Layout: a trie of token blocks. The tokens are cut into blocks of ``block_size``; each block
    stores its keys and values for every layer and hangs under the block before it, keyed by its
    own tokens. A block is therefore found only if *every* earlier token matches too: change one
    early token and nothing after it is reused, just as a provider's prompt cache breaks when one
    byte of the prefix changes. (A key's value depends on every token before it, so reusing it
    after a different prefix would be wrong, not just stale.)

    Whole blocks are found with one dictionary lookup each. The end of a stored sequence is kept
    too, as a shorter block, and the match is finished token by token: after the last whole block,
    the child that shares the most further tokens lends its first ones. So a match is exact to the
    token. That matters in a chat: each turn's prompt is the last turn's prompt and reply plus a
    short new message, and on a small model a forward pass over a few tokens costs little more
    than its fixed cost, so every token not recomputed counts. At least one prompt token is always
    prefilled, because its logits choose the first new token.

    Memory: a block costs ``2 * n_layers * n_kv_heads * head_dim`` numbers per token. When a new
    block would pass ``max_bytes`` the least recently used block without children is evicted
    (a block is useless without the blocks before it, so those are kept longer).

    Reuse never changes results: the stored keys and values are the ones a full prefill computes.
    One cache serves one model, and it empties itself when that model's weights change. Weights can
    change behind PyTorch's back (``w.data.mul_(0.5)`` moves no version counter and no pointer), so
    the cache looks at the numbers themselves: at every ``load`` and ``store`` it compares
    ``SAMPLES_PER_TENSOR`` evenly spaced numbers of every parameter with those it saw last (a few
    microseconds per tensor; reading every weight would cost as much as a forward pass). That sees
    any optimiser step, ``load_state_dict``, re-initialisation or scaling of a tensor; an edit of a
    few numbers can fall between the samples, so after editing weights by hand call ``clear()``.

    Safe to share between threads (a server shares one across requests): every public method holds
    one lock while it reads or changes the trie, so each ``load`` and ``store`` sees it whole.
    """

    def __init__(self, max_bytes: int, *, block_size: int = 16):
        self.max_bytes = check_int("max_bytes", max_bytes, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self._lock = threading.RLock()
        self._model = None  # weak reference: the cache must not keep a model alive
        self._fingerprint = None
        self._weights: torch.Tensor | None = None  # the sampled numbers (see the class docstring)
        self.clear()

    def clear(self) -> None:
        """Drop every block and reset the counters."""
        with self._lock:
            self._root = _Block((), None)
            self._recency: OrderedDict[_Block, None] = OrderedDict()  # least recently used first
            self.nbytes = 0
            self._counts = dict(requests=0, hits=0, cached_tokens=0, prefilled_tokens=0, evictions=0)

    @property
    def stats(self) -> PrefixCacheStats:
        with self._lock:
            return PrefixCacheStats(**self._counts, blocks=len(self._recency), nbytes=self.nbytes)

    def match_length(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of a prompt would be served from the cache (counts nothing)."""
        with self._lock:
            path, _, extra = self._match(tokens)
            return len(path) * self.block_size + extra

    def load(self, model: Transformer, tokens: Sequence[int], cache: KVCache) -> int:
        """Copy the longest cached prefix of ``tokens`` into the empty ``cache``; return its length.
        The caller prefills ``tokens[returned:]``."""
        if cache.length != 0:
            raise ValueError("PrefixCache.load needs an empty KV cache (cache.length == 0)")
        with self._lock:
            return self._load(model, tokens, cache)

    def store(self, model: Transformer, tokens: Sequence[int], cache: KVCache, row: int = 0) -> None:
        """Keep the blocks of ``tokens`` whose keys and values are in ``cache`` (row ``row``): the
        whole blocks, then what is left as a shorter tail block."""
        with self._lock:
            self._store(model, tokens, cache, row)

    # -- inside (each called with the lock held) --

    def _load(self, model: Transformer, tokens: Sequence[int], cache: KVCache) -> int:
        self._bind(model, cache)
        path, partner, extra = self._match(tokens)
        reused = len(path) * self.block_size + extra
        if reused:
            with torch.inference_mode():  # the blocks are concatenated straight into place: one copy
                keys, values = [block.keys for block in path], [block.values for block in path]
                if partner is not None:
                    keys.append(partner.keys[:, :, :extra])
                    values.append(partner.values[:, :, :extra])
                for row in range(cache.batch_size):
                    torch.cat(keys, dim=2, out=cache.key_table[:, row, :, :reused])
                    torch.cat(values, dim=2, out=cache.value_table[:, row, :, :reused])
            cache.length = reused
            self._touch(path + ([partner] if partner is not None else []))
        counts = self._counts
        counts["requests"] += 1
        counts["hits"] += bool(reused)
        counts["cached_tokens"] += reused
        counts["prefilled_tokens"] += len(tokens) - reused
        return reused

    def _store(self, model: Transformer, tokens: Sequence[int], cache: KVCache, row: int) -> None:
        self._bind(model, cache)
        size, length = self.block_size, min(len(tokens), cache.length)
        node, path = self._root, []
        with torch.inference_mode():
            for start in range(0, length, size):
                key = tuple(tokens[start:min(start + size, length)])
                child = node.children.get(key)
                if child is None and len(key) < size:  # a tail: skip it if a stored block already begins so
                    child = next((c for c in node.children.values() if c.tokens[:len(key)] == key), None)
                if child is None:
                    if not self._make_room(len(key), protect=path):
                        break
                    self._drop_tails_within(node, key)  # shorter tails of the same tokens are now useless
                    child = _Block(key, node, cache.key_table[:, row, :, start:start + len(key)].clone(),
                                   cache.value_table[:, row, :, start:start + len(key)].clone())
                    node.children[key] = child
                    self.nbytes += len(key) * self._token_bytes
                path.append(child)
                node = child
        self._touch(path)

    def _match(self, tokens: Sequence[int]) -> tuple[list[_Block], _Block | None, int]:
        """The whole blocks that begin ``tokens``, then the child of the last one sharing the most
        further tokens and how many it shares; all short of the last token, which is always prefilled."""
        node, path, size, usable = self._root, [], self.block_size, len(tokens) - 1
        for i in range(max(0, usable) // size):
            child = node.children.get(tuple(tokens[i * size:(i + 1) * size]))
            if child is None:
                break
            path.append(child)
            node = child
        rest = tokens[len(path) * size:max(0, usable)]
        partner, extra = None, 0
        if rest:
            for child in node.children.values():
                shared = _shared_length(child.tokens, rest)
                if shared > extra:
                    partner, extra = child, shared
        return path, partner, extra

    def _drop_tails_within(self, node: _Block, tail: tuple[int, ...]) -> None:
        """Remove ``node``'s tail blocks whose tokens all begin ``tail`` (it covers them)."""
        for key, child in list(node.children.items()):
            if len(key) < len(tail) and tail[:len(key)] == key:
                del node.children[key]
                del self._recency[child]
                self.nbytes -= len(key) * self._token_bytes

    def _touch(self, path: list[_Block]) -> None:
        # Deepest first, so every block is more recent than the blocks after it: eviction then
        # takes the ends of chains before their beginnings.
        for block in reversed(path):
            self._recency[block] = None
            self._recency.move_to_end(block)

    def _make_room(self, n_tokens: int, protect: list[_Block]) -> bool:
        """Evict least recently used leaf blocks until ``n_tokens`` more fit; False if they cannot."""
        while self.nbytes + n_tokens * self._token_bytes > self.max_bytes:
            victim = next((b for b in self._recency if not b.children and b not in protect), None)
            if victim is None:
                return False
            del victim.parent.children[victim.tokens]
            del self._recency[victim]
            self.nbytes -= len(victim.tokens) * self._token_bytes
            self._counts["evictions"] += 1
        return True

    def _bind(self, model: Transformer, cache: KVCache) -> None:
        """Tie the cache to one model, and empty it if the weights or the cache layout changed."""
        bound = self._model() if self._model is not None else None
        if bound is not None and bound is not model:
            raise ValueError("this PrefixCache holds keys and values computed by another model; "
                             "use one PrefixCache per model")
        keys = cache.keys[0]
        fingerprint = (keys.dtype, keys.device, tuple(keys.shape[1::2]), len(cache.keys))
        weights = _sample_weights(model)
        if bound is None or fingerprint != self._fingerprint or not _same(weights, self._weights):
            self.clear()
            self._model, self._fingerprint, self._weights = weakref.ref(model), fingerprint, weights
        self._token_bytes = 2 * len(cache.keys) * keys.size(1) * keys.size(3) * keys.element_size()
        if self._token_bytes * self.block_size > self.max_bytes:
            raise ValueError(f"max_bytes={self.max_bytes} cannot hold even one block of {self.block_size} tokens "
                             f"({self._token_bytes * self.block_size} bytes for this model); "
                             "raise max_bytes or lower block_size")

    def __repr__(self) -> str:  # (stats takes the lock)
        s = self.stats
        return (f"PrefixCache(blocks={s.blocks}, {self.nbytes / 2**20:.2f}/{self.max_bytes / 2**20:.2f} MiB, "
                f"requests={s.requests}, hit_rate={s.hit_rate:.0%})")


def _sample_weights(model: Transformer) -> torch.Tensor:
    """``SAMPLES_PER_TENSOR`` evenly spaced numbers of every parameter, in one new tensor."""
    with torch.inference_mode():
        return torch.cat([p.reshape(-1)[::max(1, p.numel() // SAMPLES_PER_TENSOR)] for p in model.parameters()])


def _same(a: torch.Tensor, b: torch.Tensor | None) -> bool:
    return b is not None and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
