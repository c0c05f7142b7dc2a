"""Vectors for tokens, positions and image patches: the model's first step after the tokenizer.

An embedding table is a matrix with one row per token id; "embedding" a token is looking up its
row. Training moves rows of tokens used in similar contexts close together, which is why
``nearest_neighbours`` (cosine similarity between rows) finds related words. ``project_2d`` flattens
a few hundred dimensions to two for a picture. The position helpers compare the two ways a model
learns *where* a token is: a learned table added to the input (GPT-2) or rotating queries and keys
(RoPE, Llama). ``patchify`` shows that images become tokens too: cut into squares, each square
flattened into one vector.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import torch

from llmkit.model.transformer import apply_rope, rope_tables
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.tokens.words import spaces_apart, word_ids


# --- token vectors -------------------------------------------------------------------------------

def cosine_similarities(table: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """Cosine of the angle between ``vector`` and every row of ``table`` (shape (rows,)).

    Cosine ignores length and compares only direction, so a frequent token with a long vector
    is not "similar to everything"."""
    if table.dim() != 2 or vector.dim() != 1 or vector.numel() != table.size(1):
        raise ValueError(f"expected a (rows, dim) table and a (dim,) vector, got {tuple(table.shape)} "
                         f"and {tuple(vector.shape)}")
    table, vector = table.detach().float(), vector.detach().float()
    return (table @ vector) / (table.norm(dim=1) * vector.norm()).clamp_min(1e-12)


def nearest_neighbours(table: torch.Tensor, token_id: int, k: int = 5,
                       candidates: Sequence[int] | None = None) -> list[tuple[int, float]]:
    """The ``k`` rows most similar (cosine) to row ``token_id``, best first, as ``(id, cosine)``.

    The token itself is left out. ``candidates`` limits the search to some ids (for example to
    leave out byte fragments and special tokens); by default every other row is a candidate.
    """
    n_rows = table.size(0)
    if not 0 <= token_id < n_rows:
        raise ValueError(f"token_id {token_id} is outside the table (0 .. {n_rows - 1})")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    similarity = cosine_similarities(table, table[token_id])
    allowed = torch.zeros(n_rows, dtype=torch.bool)
    if candidates is None:
        allowed[:] = True
    else:
        ids = torch.as_tensor(list(candidates), dtype=torch.long)
        if ids.numel() and (ids.min() < 0 or ids.max() >= n_rows):
            raise ValueError(f"candidates must be ids in 0 .. {n_rows - 1}")
        allowed[ids] = True
    allowed[token_id] = False
    similarity = similarity.masked_fill(~allowed.to(similarity.device), float("-inf"))
    k = min(k, int(allowed.sum()))
    best = similarity.topk(k)
    return [(int(i), float(s)) for s, i in zip(best.values, best.indices)]


def word_token_ids(tokenizer: Tokenizer, min_letters: int = 2) -> list[int]:
    """Ids of tokens that are a whole word as it appears inside a sentence: at least
    ``min_letters`` ASCII letters that, said after a space, are that one token (" king" under
    GPT-4's pre-split; "king" under the course's ``spaced`` one, which gives the space its own
    token; ``llmkit.tokens.words``). Leaving out byte fragments, word pieces and punctuation keeps
    neighbour lists readable."""
    letters = re.compile(rb"[A-Za-z]{%d,}" % min_letters)
    apart = spaces_apart(tokenizer)
    special = set(tokenizer.special_tokens.values())
    found = []
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.token_bytes(i)
        word = piece if apart else piece[1:] if piece.startswith(b" ") else b""
        if i not in special and letters.fullmatch(word) and word_ids(tokenizer, word.decode()) == [i]:
            found.append(i)
    return found


def project_2d(vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal component analysis down to two dimensions: ``(points (n, 2), explained (2,))``.

    The two directions along which the vectors spread out most, found with an SVD of the centred
    vectors; ``explained`` is the share of the total variance each direction keeps, so a small
    sum warns that the picture hides most of the structure. Signs are fixed (the largest
    coordinate of each direction is positive) so the picture is the same on every machine.
    """
    if vectors.dim() != 2 or vectors.size(0) < 2:
        raise ValueError(f"expected at least two vectors as an (n, dim) tensor, got shape {tuple(vectors.shape)}")
    centred = vectors.detach().double() - vectors.detach().double().mean(dim=0)
    _, singular, directions = torch.linalg.svd(centred, full_matrices=False)
    directions = directions[:2]
    flip = directions.gather(1, directions.abs().argmax(dim=1, keepdim=True)).sign()
    directions = directions * flip
    variance = singular ** 2
    explained = variance[:2] / variance.sum().clamp_min(1e-300)
    return (centred @ directions.T).float(), explained.float()


# --- positions -----------------------------------------------------------------------------------

def rope_score_grid(query: torch.Tensor, key: torch.Tensor, n_positions: int,
                    theta: float = 10000.0) -> torch.Tensor:
    """Attention score of one query vector placed at position i with one key vector placed at
    position j, for every (i, j): shape (n_positions, n_positions).

    Uses the model's own ``rope_tables``/``apply_rope``. Rotating both vectors by their position's
    angle leaves only the *difference* of the angles in their dot product, so every diagonal of
    the grid (a fixed offset i - j) holds one value.
    """
    head_dim = _check_pair(query, key)
    if head_dim % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions, so the vectors need an even size, got {head_dim}")
    cos, sin = (t.to(query.device) for t in rope_tables(head_dim, n_positions, theta))
    queries = apply_rope(query.detach().float().expand(n_positions, head_dim), cos, sin)
    keys = apply_rope(key.detach().float().expand(n_positions, head_dim), cos, sin)
    return queries @ keys.T


def learned_score_grid(query: torch.Tensor, key: torch.Tensor, position_table: torch.Tensor) -> torch.Tensor:
    """The same grid when positions are a learned table *added* to the vectors (GPT-2's way):
    ``(query + p_i) . (key + p_j)``. Nothing forces a fixed offset to give a fixed score; any
    relation between positions has to be learned into the table."""
    _check_pair(query, key)
    table = position_table.detach().float()
    if table.dim() != 2 or table.size(1) != query.numel():
        raise ValueError(f"position_table must be (positions, {query.numel()}), got {tuple(table.shape)}")
    return (query.detach().float() + table) @ (key.detach().float() + table).T


def offset_spread(grid: torch.Tensor) -> float:
    """Largest spread (max - min) of the scores along any diagonal i - j of a square grid:
    zero (up to rounding) when the score depends only on the offset between the two positions."""
    n = grid.size(0)
    return max(float(d.max() - d.min()) for d in (grid.diagonal(offset) for offset in range(-(n - 1), n)))


def _check_pair(query: torch.Tensor, key: torch.Tensor) -> int:
    if query.dim() != 1 or query.shape != key.shape:
        raise ValueError(f"query and key must be 1-D vectors of the same size, got {tuple(query.shape)} "
                         f"and {tuple(key.shape)}")
    return query.numel()


# --- images --------------------------------------------------------------------------------------

def patchify(image: np.ndarray | torch.Tensor, patch: int = 28) -> torch.Tensor:
    """Cut an image (height, width, channels) or (height, width) into ``patch`` x ``patch`` squares
    and flatten each: shape (n_patches, patch * patch * channels), patches in reading order
    (left to right, then top to bottom), pixels inside a patch in the same order.

    A vision transformer then multiplies each row by one learned matrix to get a d_model vector:
    from there on a patch is a token like any other.
    """
    pixels = torch.as_tensor(np.asarray(image)).float()
    if pixels.dim() == 2:
        pixels = pixels[:, :, None]
    if pixels.dim() != 3:
        raise ValueError(f"expected an image of shape (height, width) or (height, width, channels), "
                         f"got {tuple(pixels.shape)}")
    if patch < 1:
        raise ValueError(f"patch must be a positive number of pixels, got {patch}")
    height, width, channels = pixels.shape
    if height % patch or width % patch:
        suggestion = f"{_round_up(height, patch)}x{_round_up(width, patch)}"
        raise ValueError(f"a {height}x{width} image does not split into {patch}x{patch} patches; resize or pad "
                         f"it to multiples of {patch} first (e.g. {suggestion})")
    rows, cols = height // patch, width // patch
    grid = pixels.reshape(rows, patch, cols, patch, channels).permute(0, 2, 1, 3, 4)  # (rows, cols, p, p, c)
    return grid.reshape(rows * cols, patch * patch * channels)


def unpatchify(patches: torch.Tensor, rows: int, cols: int, patch: int = 28) -> torch.Tensor:
    """Put ``patchify``'s rows back into a (height, width, channels) image (its exact inverse)."""
    if patches.dim() != 2 or patches.size(0) != rows * cols or patches.size(1) % (patch * patch):
        raise ValueError(f"expected ({rows * cols}, {patch}*{patch}*channels) patch vectors, "
                         f"got {tuple(patches.shape)}")
    channels = patches.size(1) // (patch * patch)
    grid = patches.reshape(rows, cols, patch, patch, channels).permute(0, 2, 1, 3, 4)
    return grid.reshape(rows * patch, cols * patch, channels)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
