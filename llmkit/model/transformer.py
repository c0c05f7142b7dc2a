"""The transformer: token ids in, next-token logits out, for the GPT-2 and Llama families.

Both families share one skeleton (embed -> N pre-norm blocks -> final norm -> LM head) and differ
only in four choices, all fields of ``ModelConfig``:

    norm       LayerNorm (GPT-2)            | RMSNorm (Llama)
    mlp        GELU, 4 x d_model (GPT-2)    | SwiGLU, ~8/3 x d_model (Llama)
    positions  learned table added at input | rotary (RoPE) applied to queries and keys
    bias       biases on every Linear       | no biases

The whole model is in this file; ``ModelConfig`` and the cost estimates are in ``llmkit.model.config``.
Saving, loading and importing Hugging Face weights live in ``llmkit.model.weights``; the KV cache in
``llmkit.model.kvcache``; looking inside in ``llmkit.model.inspect``.

Inference with a KV cache (generation) runs the same computation through ``FastModel`` at the end
of this file: the blocks as plain tensor functions, without ``nn.Module``'s per-call work, which
for one token of a small model costs as much as the arithmetic. It is used only when nothing needs
the modules themselves (training, hooks, the explicit attention, swapped layers), and gives the
same logits bit for bit.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.hooks import RemovableHandle

from llmkit.model.config import ModelConfig
from llmkit.model.config import CostEstimate, count_params, estimate_cost  # noqa: F401 (re-exported for older imports)
from llmkit.model.kvcache import KVCache


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


def split_heads(qkv: torch.Tensor, head_dim: int, heads: tuple[int, int, int],
                rope: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused projection (B, T, all heads x head_dim) as q, k, v of shape (B, heads, T, head_dim).

    One view and one transpose lay out every head at once, so the split copies nothing; with
    rotary positions the queries and keys are rotated together, in one call."""
    batch, time, _ = qkv.shape
    qkv = qkv.view(batch, time, -1, head_dim).transpose(1, 2)
    if rope is None:
        return qkv.split_with_sizes(heads, dim=1)  # (Tensor.split is a Python wrapper around this)
    n_q, n_kv, _ = heads
    q, k = apply_rope(qkv[:, :n_q + n_kv], *rope).split_with_sizes((n_q, n_kv), dim=1)
    return q, k, qkv[:, n_q + n_kv:]


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """True where query i may look at key j. The queries are the *last* n_queries positions, so
    query i sits at position n_keys - n_queries + i and sees every key up to and including it."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=n_keys - n_queries)


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float = 0.0,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of the queries (the last positions) over all keys, in one fused kernel.

    New tokens after a cached prefix need ``causal_mask``; pass it as ``mask`` when every layer of
    a pass shares it, so that it is made once rather than once per layer."""
    n_queries, n_keys = q.size(-2), k.size(-2)
    grouped = q.size(1) != k.size(1)  # fewer key/value heads than query heads
    if n_queries == 1 or n_queries == n_keys:  # one new token sees everything; or a plain causal square
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=n_queries > 1, enable_gqa=grouped)
    if mask is None:
        mask = causal_mask(n_queries, n_keys, q.device)  # new tokens after a cached prefix
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

    def forward(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None) -> torch.Tensor:
        batch, time, _ = x.shape
        q, k, v = split_heads(self.qkv(x), self.head_dim, self.heads, rope)
        if cache is not None:  # keys/values of positions [0, start + time): the past plus ours
            k, v = cache.update(self.layer_index, start, k, v)
            if k.dtype != q.dtype:  # autocast made q lower precision than the cache
                k, v = k.to(q.dtype), v.to(q.dtype)
        y = self.explicit_attention(q, k, v) if self.explicit else self.fast_attention(q, k, v)
        y = y.transpose(1, 2).reshape(batch, time, -1)  # heads side by side again
        return dropout(self.out(y), self.dropout, self.training)

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

    def forward(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), start, rope, cache)
        return x + dropout(self.mlp(self.mlp_norm(x)), self.dropout, self.training)


# --- the model -----------------------------------------------------------------------------------

def embed_tokens(embed: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``embed(ids)``, with a clear error for an id outside the vocabulary.

    On the CPU the lookup checks every id itself (it raises IndexError), so a decode step pays
    nothing more; on a GPU a bad id is a device-side assert that kills the process, so there the
    ids are checked before the lookup."""
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
        self._fast, self._fast_key = None, None  # see _fast_model
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
        if cache is not None and not self.training:  # inference: skip the module machinery if we may
            fast = self._fast_model(cache)
            if fast is not None:
                return fast(ids, start, cache, last_only)
        x = embed_tokens(self.embed, ids, self.config.vocab_size)
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

    def step(self, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One decode step: logits (batch, vocab) for one new token per sequence, ``ids`` (batch,),
        right after the ``cache.length`` cached positions.

        The same as ``self(ids[:, None], cache=cache)[:, -1]``, which is what it runs whenever the
        modules must (training, a hook on the model) or something needs checking (a full cache, a
        batch that does not match it). In the plain case it goes straight to ``FastModel.step``:
        a generation loop takes this path once per token, and on a small model the checks and
        the reshapes around them cost a noticeable share of the step."""
        if ids.dim() != 1:
            raise ValueError(f"step takes one new token per sequence, shape (batch,), got {tuple(ids.shape)}; "
                             "for several new tokens call the model: model(ids, cache=cache)")
        fast = None
        if not (self.training or self._forward_hooks or self._forward_pre_hooks):
            fast = self._fast_model(cache)
        if fast is None or ids.size(0) != cache.batch_size or cache.length >= cache.max_length:
            return self(ids[:, None], cache=cache)[:, -1]
        return fast.step(ids, cache.length, cache)

    def _fast_model(self, cache: KVCache) -> FastModel | None:
        """The ``FastModel`` for inference, or None when the modules must run (``FastModel.of``).

        Checked once per KV cache (that is, per request) and again whenever a hook is registered
        anywhere (every registration takes the next ``RemovableHandle`` id), so that a hook added
        between two decode steps still sees the second one."""
        key = (cache.serial, RemovableHandle.next_id)
        if self._fast_key != key:
            self._fast, self._fast_key = FastModel.of(self, previous=self._fast), key
        return self._fast

    def _check_ids(self, ids: torch.Tensor) -> tuple[int, int]:
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int32):
            raise TypeError(f"ids must be an integer tensor (torch.long), got "
                            f"{ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__}")
        if ids.dim() != 2 or ids.size(1) == 0:
            raise ValueError(f"ids must have shape (batch, time) with time >= 1, got {tuple(ids.shape)}; "
                             "for a single sequence pass ids[None]")
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

    # Files: the code lives in llmkit.model.weights (one place for everything that touches disk).
    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``."""
        from llmkit.model import weights
        return weights.save(self, directory)

    @classmethod
    def load(cls, directory: str | Path, device: torch.device | str | None = None) -> Transformer:
        """Read a folder written by ``save`` (in eval mode)."""
        from llmkit.model import weights
        return weights.load(directory, device=device)

    @classmethod
    def from_hf(cls, model_or_dir: Any, device: torch.device | str | None = None) -> Transformer:
        """Import a Hugging Face ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` (object or saved folder)."""
        from llmkit.model import weights
        return weights.from_hf(model_or_dir, device=device)


# --- inference without the module machinery ----------------------------------------------------

class FastBlock:
    """``Block.forward`` in inference, as plain tensor functions of the block's weights.

    A decode step of a small model multiplies one vector by small matrices, and each ``nn.Module``
    call around them (hook checks, attribute lookups) costs about as much as the arithmetic; a
    block makes nine such calls. This computes the same thing, with the same ops in the same order,
    but looks the weights up once. ``Transformer.forward`` uses it only when nothing needs the
    modules themselves (see ``FastModel.of``).
    """

    def __init__(self, block: Block):
        attn, mlp = block.attn, block.mlp
        self.attn_norm, self.mlp_norm = norm_function(block.attn_norm), norm_function(block.mlp_norm)
        self.layer_index, self.head_dim, self.heads = attn.layer_index, attn.head_dim, attn.heads
        self.qkv, self.out = (attn.qkv.weight, attn.qkv.bias), (attn.out.weight, attn.out.bias)
        self.swiglu = isinstance(mlp, SwiGLU)
        self.up = (mlp.gate_up.weight, mlp.gate_up.bias) if self.swiglu else (mlp.up.weight, mlp.up.bias)
        self.down = (mlp.down.weight, mlp.down.bias)

    def __call__(self, x: torch.Tensor, start: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                 cache: KVCache, mask: torch.Tensor | None) -> torch.Tensor:
        """Several new tokens per sequence. ``mask`` is the ``causal_mask`` of new tokens after a
        cached prefix (None for a plain causal square), made once for all the layers."""
        batch, time, _ = x.shape
        q, k, v = split_heads(F.linear(self.attn_norm(x), *self.qkv), self.head_dim, self.heads, rope)
        k, v = cache.update(self.layer_index, start, k, v)
        if k.dtype != q.dtype:
            k, v = k.to(q.dtype), v.to(q.dtype)
        y = fused_attention(q, k, v, mask=mask).transpose(1, 2).reshape(batch, time, -1)
        return self.feed_forward(x + F.linear(y, *self.out))

    def step(self, x: torch.Tensor, position: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
             cache: KVCache) -> torch.Tensor:
        """``__call__`` for one new token per sequence, on rows (batch, width). With one position the
        heads come straight out of a view: no transpose, split or reshape back, a few small ops fewer
        per layer on the path every generated token takes. Same ops otherwise, same result."""
        batch = x.size(0)
        heads = F.linear(self.attn_norm(x), *self.qkv).view(batch, -1, 1, self.head_dim)  # (B, all heads, 1, hd)
        n_q, n_kv, _ = self.heads
        if rope is None:
            q, k, v = heads.split_with_sizes(self.heads, dim=1)
        else:
            q, k = apply_rope(heads[:, :n_q + n_kv], *rope).split_with_sizes((n_q, n_kv), dim=1)
            v = heads[:, n_q + n_kv:]
        keys, values = cache.update(self.layer_index, position, k, v)
        if keys.dtype != q.dtype:
            keys, values = keys.to(q.dtype), values.to(q.dtype)
        y = F.scaled_dot_product_attention(q, keys, values, enable_gqa=n_q != n_kv).view(batch, -1)
        return self.feed_forward(x + F.linear(y, *self.out))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The residual MLP half of the block."""
        h = F.linear(self.mlp_norm(x), *self.up)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + F.linear(h, *self.down)


class FastModel:
    """``Transformer.forward`` with a KV cache in inference, built from FastBlocks."""

    def __init__(self, model: Transformer, tensors: list[torch.Tensor | None] | None = None):
        self.tensors = tensors or []  # the parameters and buffers it was built from (see ``of``)
        # torch.embedding is the kernel F.embedding calls, without its Python wrapper
        self.embed, self.vocab_size = functools.partial(torch.embedding, model.embed.weight), model.config.vocab_size
        self.pos_embed = model.pos_embed.weight if model.pos_embed is not None else None
        self.rope = (model.rope_cos, model.rope_sin) if model.config.positions == "rope" else None
        self.blocks = [FastBlock(block) for block in model.blocks]
        self.norm, self.head = norm_function(model.norm), model.lm_head.weight

    @staticmethod
    def of(model: Transformer, previous: FastModel | None = None) -> FastModel | None:
        """A FastModel for ``model``, or None if it must run as modules: a module has a hook, an
        attention layer is in its explicit form, or a layer was swapped for a module of another kind.

        ``previous`` comes back as it is when it was built from the very same parameter and buffer
        objects (a swapped layer or a replaced tensor means a new one): building one costs as much
        as the Python overhead of a short forward pass, and a chat turn is often not much more."""
        kinds = {Transformer, nn.Embedding, nn.ModuleList, Block, Attention, MLP, SwiGLU, nn.Linear,
                 nn.LayerNorm, nn.RMSNorm, nn.Identity}
        tensors = []
        for module in model.modules():  # (the model's own hooks still run: forward is called as usual)
            hooked = module is not model and (module._forward_hooks or module._forward_pre_hooks)
            if type(module) not in kinds or hooked or (isinstance(module, Attention) and module.explicit):
                return None
            tensors += module._parameters.values()
            tensors += module._buffers.values()
        if previous is not None and len(previous.tensors) == len(tensors) and all(
                old is new for old, new in zip(previous.tensors, tensors)):
            return previous
        return FastModel(model, tensors)

    def __call__(self, ids: torch.Tensor, start: int, cache: KVCache, last_only: bool) -> torch.Tensor:
        if ids.size(1) == 1:  # one new token per sequence: a decode step
            return self.step(ids[:, 0], start, cache).unsqueeze(1)
        end = start + ids.size(1)
        x = embed_tokens(self.embed, ids, self.vocab_size)
        if self.pos_embed is not None:
            x = x + self.pos_embed[start:end]
        rope = (self.rope[0][start:end], self.rope[1][start:end]) if self.rope is not None else None
        mask = causal_mask(ids.size(1), end, x.device) if start > 0 else None  # one for every layer
        for block in self.blocks:
            x = block(x, start, rope, cache, mask)
        cache.length = end
        if last_only:
            x = x[:, -1:]
        return F.linear(self.norm(x), self.head)

    def step(self, ids: torch.Tensor, position: int, cache: KVCache) -> torch.Tensor:
        """Logits (batch, vocab) for one new token per sequence, ``ids`` (batch,), at ``position``."""
        x = embed_tokens(self.embed, ids, self.vocab_size)
        if self.pos_embed is not None:
            x = x + self.pos_embed[position]
        rope = None
        if self.rope is not None:
            rope = (self.rope[0][position:position + 1], self.rope[1][position:position + 1])
        for block in self.blocks:
            x = block.step(x, position, rope, cache)
        cache.length = position + 1
        return F.linear(self.norm(x), self.head)


def norm_function(norm: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A LayerNorm or RMSNorm module as a plain function of x, with the same weights.

    It calls the kernels ``F.layer_norm`` and ``F.rms_norm`` call, without their Python checks:
    the same numbers, a microsecond less on each of the nine norms of a decode step."""
    if isinstance(norm, nn.RMSNorm):
        return functools.partial(torch.rms_norm, normalized_shape=norm.normalized_shape, weight=norm.weight,
                                 eps=norm.eps)
    return functools.partial(torch.layer_norm, normalized_shape=norm.normalized_shape, weight=norm.weight,
                             bias=norm.bias, eps=norm.eps)
