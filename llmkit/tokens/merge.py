"""BPE inside one chunk: join neighbouring pieces, lowest rank first, until no pair is a token.

A chunk (one pre-split piece of text) starts as its UTF-8 bytes, one piece each. At every step
the neighbouring pair whose joined bytes have the lowest rank (the earliest merge learned) is
joined; on a tie the leftmost pair goes first. This is tiktoken's rule, so the ids are its ids.

:func:`merge_chunk_reference` is that rule written out: scan every pair, join the best, scan
again. It is easy to check and fast for the short chunks that real text is made of, but each
scan costs the chunk's length, so a chunk of n bytes costs about n² steps: one chunk of 32,000
spaces would take over a minute. :func:`merge_chunk_heap` gives the same result in about
n log n steps: the pieces form a linked list (joining two is a constant-time unlink) and a heap
holds every candidate pair by ``(rank, position)``, so the best pair is always on top. A join
makes old candidates out of date; rather than search the heap for them, each popped entry is
checked against the list and skipped if its pieces have changed ("lazy invalidation").
:func:`merge_chunk` picks the one to use by the chunk's length.
"""
from __future__ import annotations

import heapq

# Chunks longer than this (in bytes) go to the heap; below it the plain scan is faster.
LONG_CHUNK = 16


def merge_chunk_reference(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """Readable BPE for one chunk: repeatedly join the neighbouring pair with the lowest rank."""
    if piece in ranks:  # a whole chunk that is one token (as tiktoken does)
        return [ranks[piece]]
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best_rank, best_index = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_index = rank, i
        if best_rank is None:
            break
        parts[best_index : best_index + 2] = [parts[best_index] + parts[best_index + 1]]
    return [ranks[part] for part in parts]


def merge_chunk_heap(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """The same ids as :func:`merge_chunk_reference`, in O(n log n) for a chunk of n bytes.

    A piece is named by the byte offset where it starts; ``end[s]`` is where it stops, and
    ``before[s]`` is the start of the piece to its left (-1 for none). A heap entry
    ``(rank, s, stop)`` says "the piece at ``s`` joined with its right neighbour, which ends at
    ``stop``, is a token of that rank". It is still true if the piece at ``s`` still exists and
    its right neighbour still ends at ``stop``: pieces only ever grow, so the joined bytes are
    then exactly ``piece[s:stop]``. Ordering by ``(rank, s)`` makes ties go to the leftmost pair.
    """
    if piece in ranks:
        return [ranks[piece]]
    n = len(piece)
    end = list(range(1, n + 1))
    before = list(range(-1, n - 1))
    alive = [True] * n
    rank_of, push, pop = ranks.get, heapq.heappush, heapq.heappop  # bound once: this loop is hot
    heap = [(ranks[piece[s : s + 2]], s, s + 2) for s in range(n - 1) if piece[s : s + 2] in ranks]
    heapq.heapify(heap)
    while heap:
        _, s, stop = pop(heap)
        right = end[s]
        if not alive[s] or right >= n or end[right] != stop:
            continue  # out of date: one of the two pieces has joined something else since
        alive[right] = False  # join: the piece at s now also covers its right neighbour
        end[s] = stop
        if stop < n:  # the new piece and its right neighbour
            before[stop] = s
            rank = rank_of(piece[s : end[stop]])
            if rank is not None:
                push(heap, (rank, s, end[stop]))
        left = before[s]
        if left >= 0:  # its left neighbour and the new piece
            rank = rank_of(piece[left:stop])
            if rank is not None:
                push(heap, (rank, left, stop))
    ids, s = [], 0
    while s < n:
        ids.append(ranks[piece[s : end[s]]])
        s = end[s]
    return ids


def merge_chunk(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """BPE ids for one chunk: the plain scan for short chunks, the heap for long ones."""
    if len(piece) <= LONG_CHUNK:
        return merge_chunk_reference(piece, ranks)
    return merge_chunk_heap(piece, ranks)


def recover_merges(ranks: dict[bytes, int]) -> dict[tuple[int, int], int]:
    """Rebuild (left, right) -> id for ranks that come without merges (tiktoken's files).

    A token's two parts are what encoding its bytes gives when only lower ranks may be used.
    """
    merges = {}
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            candidates = [(ranks.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1)]
            best_rank, i = min(candidates)
            if best_rank >= rank:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges[(ranks[parts[0]], ranks[parts[1]])] = rank
    return merges
