"""Paged KV memory: one preallocated pool of fixed-size blocks, and a forward pass that reads it.

A server cannot give every request a cache as long as the context window: most replies are short,
so most of that memory would sit empty. PagedAttention (Kwon et al., 2023, the idea behind vLLM)
cuts the memory into blocks of ``block_size`` positions, like pages of virtual memory. A sequence
holds a *block table*, the list of its blocks in order; position ``p`` lives in block
``table[p // block_size]`` at offset ``p % block_size``. A sequence takes a new block only when its
last one is full, and gives every block back the moment it stops.

Blocks also make prompt caching free: a full block is named by every token up to its end (a key
depends on all the tokens before it), so two requests whose prompts start alike share the very
same blocks. A block no sequence holds any more stays in the pool with its name, and is reused
(evicted) only when a fresh block is needed, least recently used first.

``paged_forward`` is ``Transformer.forward`` over this layout, for several sequences at once,
each reading as many new tokens as it has (``Reads``): each row's new keys and values are written
into its blocks, then each row's queries attend to the keys gathered from its own block table,
with a mask that hides positions it does not own.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from llmkit.model.fast import FastBlock, FastModel

DEFAULT_BLOCK_SIZE = 16


class OutOfBlocks(RuntimeError):
    """No free or evictable block is left in the pool."""


class BlockPool:
    """Keys and values for ``num_blocks`` blocks of ``block_size`` positions, for every layer.

    ``keys[layer, block]`` has shape (block_size, n_kv_heads, head_dim): positions first, so a
    row's blocks laid end to end are its positions in order without a copy. Each block has a
    reference count (how many sequences hold it); a full block of a prompt can carry a name (the
    tuple of every token up to its end) so that later prompts find it.
    """

    def __init__(self, config, num_blocks: int, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a whole number >= 1, got {num_blocks!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a whole number >= 1, got {block_size!r}")
        shape = (config.n_layers, num_blocks, block_size, config.n_kv_heads, config.head_dim)
        # Zeros, not torch.empty: attention masks the unwritten slots of a sequence's last block,
        # but a masked weight of 0 times a NaN left in uninitialised memory is still NaN.
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.refs = [0] * num_blocks
        self.free: deque[int] = deque(range(num_blocks))  # never named, or name dropped
        self.idle: OrderedDict[int, None] = OrderedDict()  # named, held by no one; least recently used first
        self.named: dict[tuple[int, ...], int] = {}
        self.name_of: dict[int, tuple[int, ...]] = {}
        self.evictions = 0

    @classmethod
    def of_size(cls, config, megabytes: float, *, block_size: int = DEFAULT_BLOCK_SIZE,
                device=None, dtype: torch.dtype = torch.float32) -> BlockPool:
        """As many blocks as fit in ``megabytes`` MiB (keys and values of every layer)."""
        per_block = block_bytes(config, block_size, dtype)
        num_blocks = int(megabytes * 2**20 // per_block)
        if num_blocks < 1:
            raise ValueError(f"{megabytes} MiB holds no KV block: one block of {block_size} positions takes "
                             f"{per_block / 2**20:.3f} MiB for this model; give a larger --kv-cache-mb")
        return cls(config, num_blocks, block_size=block_size, device=device, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()

    @property
    def available(self) -> int:
        """Blocks a sequence could take now: free ones plus named ones no one holds."""
        return len(self.free) + len(self.idle)

    @property
    def used(self) -> int:
        return self.num_blocks - self.available

    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.block_size)

    def allocate(self) -> int:
        """A block for one sequence: a free one, else the least recently used idle named one."""
        if self.free:
            block = self.free.popleft()
        elif self.idle:
            block, _ = self.idle.popitem(last=False)
            del self.named[self.name_of.pop(block)]
            self.evictions += 1
        else:
            raise OutOfBlocks("the KV pool has no free block")
        self.refs[block] = 1
        return block

    def release(self, blocks: list[int]) -> None:
        """Give blocks back. A named block stays findable until its memory is needed."""
        for block in blocks:
            self.refs[block] -= 1
            if self.refs[block] == 0:
                if block in self.name_of:
                    self.idle[block] = None
                else:
                    self.free.append(block)

    def find_prefix(self, tokens: list[int]) -> list[int]:
        """Hold and return the named blocks that spell the start of ``tokens``, in order. At least
        one token is left over, because the model must read it to score the first new token."""
        found = []
        for end in range(self.block_size, len(tokens), self.block_size):
            block = self.named.get(tuple(tokens[:end]))
            if block is None:
                break
            if self.refs[block] == 0:
                del self.idle[block]
            self.refs[block] += 1
            found.append(block)
        return found

    def name(self, table: list[int], tokens: list[int]) -> int:
        """Name every full block of a sequence whose keys and values are now written for
        ``tokens``; returns how many blocks got a new name (the prompt-cache writes)."""
        new = 0
        for index in range(len(tokens) // self.block_size):
            name, block = tuple(tokens[:(index + 1) * self.block_size]), table[index]
            if name in self.named or block in self.name_of:
                continue
            self.named[name], self.name_of[block] = block, name
            new += 1
        return new


def block_bytes(config, block_size: int, dtype: torch.dtype = torch.float32) -> int:
    """Memory of one block: keys and values of every layer for ``block_size`` positions."""
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * config.n_layers * config.n_kv_heads * block_size * config.head_dim * element


# --- the forward pass over block tables ------------------------------------------------------

@dataclass
class Reads:
    """What one forward pass reads: each row's new tokens, rows laid end to end.

    Rows read different numbers of tokens: a request admitted since the last step reads its prompt
    (past any cached blocks), a decoding one its newest token. The matmuls, most of the work, take
    the tokens as one long list, so a prompt rides along with the decode rows in one pass instead
    of stopping the batch for a pass of its own (Sarathi, Agrawal et al. 2023). Only attention
    needs rows, so ``padded`` lays the tokens out as (rows, width), padding a short row with
    copies of its last token (their outputs are dropped), and ``packed`` lays them back.
    """

    ids: torch.Tensor  # (tokens,)
    positions: torch.Tensor  # (tokens,) each token's position in its sequence
    slots: tuple[torch.Tensor, torch.Tensor]  # (block, offset) of each token's key and value
    tables: torch.Tensor  # (rows, blocks), padded with the row's first block (the mask hides it)
    padded: torch.Tensor  # (rows, width): the token at each place of a row
    packed: torch.Tensor  # (tokens,): each token's place in the (rows x width) layout
    last: torch.Tensor  # (rows,): each row's last token, whose logits choose its next one

    @classmethod
    def of(cls, rows: list[tuple[list[int], int, list[int]]], block_size: int, device=None) -> Reads:
        """From (new tokens, position of the first, block table) per row; the table must already
        hold a block for every new position."""
        width, n_blocks = max(len(new) for new, _, _ in rows), max(len(table) for _, _, table in rows)
        ids, positions, blocks, padded, packed, last = [], [], [], [], [], []
        for row, (new, start, table) in enumerate(rows):
            if not new:
                raise ValueError(f"row {row} reads no token; every row of a pass reads at least one")
            first = len(ids)
            ids += new
            positions += range(start, start + len(new))
            blocks += [table[p // block_size] for p in range(start, start + len(new))]
            padded.append([first + min(place, len(new) - 1) for place in range(width)])
            packed += range(row * width, row * width + len(new))
            last.append(len(ids) - 1)
        tables = [table + table[:1] * (n_blocks - len(table)) for _, _, table in rows]
        positions_t = torch.tensor(positions, device=device)
        return cls(torch.tensor(ids, device=device), positions_t,
                   (torch.tensor(blocks, device=device), positions_t % block_size),
                   torch.tensor(tables, device=device), torch.tensor(padded, device=device),
                   torch.tensor(packed, device=device), torch.tensor(last, device=device))


def paged_forward(fast: FastModel, pool: BlockPool, reads: Reads) -> torch.Tensor:
    """Next-token logits (rows, vocab) after the last of each row's new tokens. Every row's earlier
    positions must already be in its blocks; the new ones are written there on the way."""
    x = fast.embed(reads.ids).unsqueeze(0)  # (1, tokens, d_model): the tokens as one long row
    if fast.pos_embed is not None:
        x = x + fast.pos_embed[reads.positions]
    rope = None
    if fast.rope is not None:  # one angle per token, shared by every head
        rope = (fast.rope[0][reads.positions], fast.rope[1][reads.positions])
    visible = torch.arange(reads.tables.size(1) * pool.block_size, device=x.device)
    # (rows, 1, width, keys): a token sees its own row's positions up to its own, nothing else
    mask = (visible <= reads.positions[reads.padded].unsqueeze(-1)).unsqueeze(1)
    for layer, block in enumerate(fast.blocks):
        x = paged_block(block, pool, layer, x, rope, reads, mask)
    return fast.head(fast.norm(x[0, reads.last]))


def paged_block(block: FastBlock, pool: BlockPool, layer: int, x: torch.Tensor, rope, reads: Reads,
                mask: torch.Tensor) -> torch.Tensor:
    """One layer of ``paged_forward``: ``FastBlock.__call__`` with the cache in blocks."""
    tokens = x.size(1)
    heads = block.qkv(block.attn_norm(x)).view(1, tokens, -1, block.head_dim).transpose(1, 2)
    q, k, v = block.rotate(heads, rope)  # (1, heads, tokens, head_dim) each
    pool.keys[layer][reads.slots] = k[0].transpose(0, 1)  # (tokens, heads, head_dim) into place
    pool.values[layer][reads.slots] = v[0].transpose(0, 1)
    keys, values = gather(pool.keys[layer], reads.tables), gather(pool.values[layer], reads.tables)
    rows, width = reads.padded.shape
    q = q[0][:, reads.padded.flatten()].view(q.size(1), rows, width, -1).transpose(0, 1)  # (rows, heads, width, hd)
    n_q, n_kv, _ = block.heads
    y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=n_q != n_kv)
    y = y.transpose(1, 2).reshape(rows * width, -1)[reads.packed].unsqueeze(0)  # back to (1, tokens, all heads)
    return block.feed_forward(x + block.out(y))


def gather(layer_pool: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """Each row's blocks laid end to end: (rows, heads, blocks x block_size, head_dim). One copy
    (``index_select``, the blocks in table order); the rest are views."""
    rows, n_blocks = tables.shape
    _, size, heads, dim = layer_pool.shape
    picked = layer_pool.index_select(0, tables.flatten()).view(rows, n_blocks * size, heads, dim)
    return picked.transpose(1, 2)
