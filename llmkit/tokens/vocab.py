"""The vocabulary a tokenizer is built from, checked before anything uses it.

A tokenizer's ids index a model's embedding table and every later lookup, so a bad id does
damage far from where it was made: a special token with id 10^9 makes every loop over the
vocabulary run a billion times, and two tokens with one id make decoding ambiguous. These
checks run once, when a ``Tokenizer`` is built (from training, a file or tiktoken), and each
failure names the token and the rule it breaks.
"""
from __future__ import annotations

from llmkit.checks import is_int

# Ids may leave gaps (cl100k_base leaves 16 unused ids before its last special token), but not
# many: every unused id is an embedding row that is trained for nothing.
MAX_UNUSED_IDS = 1024


def build_vocab(
    ranks: dict[bytes, int], merges: dict[tuple[int, int], int] | None, special: dict[str, int]
) -> dict[int, bytes]:
    """Id -> bytes for every token (ordinary, merged, special), or a ``ValueError`` naming the problem."""
    vocab = _ordinary_tokens(ranks)
    for (left, right), new_id in (merges or {}).items():
        _add_merge(vocab, left, right, new_id)
    for name, token_id in special.items():
        _check_special(vocab, name, token_id)
        vocab[token_id] = name.encode("utf-8")
    _check_range(vocab)
    return vocab


def _ordinary_tokens(ranks: dict[bytes, int]) -> dict[int, bytes]:
    if not isinstance(ranks, dict):
        raise TypeError(f"mergeable_ranks must be a dict of token bytes -> id, not {type(ranks).__name__}")
    vocab: dict[int, bytes] = {}
    for token, rank in ranks.items():
        if not isinstance(token, bytes) or not token:
            raise ValueError(f"mergeable_ranks has the key {token!r}: every token must be non-empty bytes")
        if not is_int(rank) or rank < 0:
            raise ValueError(f"token {token!r} has the id {rank!r}: ids must be whole numbers >= 0")
        if rank in vocab:
            raise ValueError(f"tokens {vocab[rank]!r} and {token!r} both have the id {rank}: ids must be unique")
        vocab[rank] = token
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"mergeable_ranks lacks the byte(s) {missing[:8]}; a byte-level BPE needs all 256")
    return vocab


def _add_merge(vocab: dict[int, bytes], left, right, new_id) -> None:
    """A merge may repeat the bytes of an earlier token under a new id, but never reuse another token's id."""
    for part in (left, right, new_id):
        if not is_int(part) or part < 0:
            raise ValueError(f"the merge ({left!r}, {right!r}) -> {new_id!r} has a bad id {part!r}: ids are whole numbers >= 0")
    if left not in vocab or right not in vocab:
        unknown = left if left not in vocab else right
        raise ValueError(f"the merge ({left}, {right}) -> {new_id} uses id {unknown}, which no earlier token has")
    joined = vocab[left] + vocab[right]
    if vocab.setdefault(new_id, joined) != joined:
        raise ValueError(
            f"the merge ({left}, {right}) -> {new_id} gives id {new_id} to {joined!r}, "
            f"but it already belongs to {vocab[new_id]!r}: ids must be unique"
        )


def _check_special(vocab: dict[int, bytes], name, token_id) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"special token name {name!r} must be a non-empty string such as '<|endoftext|>'")
    if not is_int(token_id) or token_id < 0:
        raise ValueError(f"special token {name!r} has the id {token_id!r}: ids must be whole numbers >= 0")
    if token_id in vocab:
        raise ValueError(
            f"special token {name!r} has the id {token_id}, which already belongs to {vocab[token_id]!r}: "
            f"ids must be unique"
        )


def _check_range(vocab: dict[int, bytes]) -> None:
    largest = max(vocab)
    limit = len(vocab) + MAX_UNUSED_IDS
    if largest >= limit:
        owner = vocab[largest]
        raise ValueError(
            f"the id {largest} (of {owner!r}) is far beyond the {len(vocab)} tokens: ids must stay below "
            f"{limit} (at most {MAX_UNUSED_IDS} unused ids), or every table indexed by id grows to {largest + 1} rows. "
            f"Number the tokens from 0 without large gaps"
        )
