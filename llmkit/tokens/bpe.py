"""Training byte-level BPE: a readable reference trainer and the fast trainer used by default.

Byte pair encoding starts from the 256 possible bytes, so every text can be written down and
nothing is ever "unknown". Training then repeats one step: find the pair of neighbouring tokens
that occurs most often in the training text and give it a new id. After ``n`` steps the
vocabulary has ``256 + n`` tokens, and frequent words have become single tokens.

Before counting, the text is cut into chunks by a regular expression (words, numbers,
punctuation runs, whitespace; see :mod:`llmkit.tokens.pattern`), so merges never cross a chunk
boundary: " dog" and "." never fuse into one token.

Two trainers learn the same merges. :func:`train_reference` is the definition written out: it
keeps every chunk of the text (:func:`split_chunks`) and recounts every pair after each merge,
which is easy to check and slow. :func:`train_fast` is what ``Tokenizer.train`` uses: the same
word appears thousands of times, so it works on each distinct chunk once with its number of
occurrences (:func:`count_chunks`) and updates the counts a merge changes instead of recounting.

Both trainers pick the same pair at every step: the highest count wins, and a tie goes to the
smallest pair of token ids, compared as ``(left, right)``. This rule does not depend on the order
of a dict, and it is the one nanochat's Rust trainer ``rustbpe`` uses, so the three agree exactly.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

import regex

from llmkit.checks import check_bool, check_int
from llmkit.tokens.pattern import splitter

Pair = tuple[int, int]


def train_merges(
    text: str | Iterable[str],
    vocab_size: int,
    *,
    pattern: str | None,
    special_tokens: list[str],
    trainer: str = "fast",
    progress: bool = False,
) -> list[Pair]:
    """The ``vocab_size - 256 - len(special_tokens)`` merges a tokenizer of that size needs.

    Documents are cut at special-token text first, so a special token never takes part in a
    merge; ``trainer`` picks :func:`train_fast` or :func:`train_reference` (same merges).
    """
    documents = [text] if isinstance(text, str) else list(text)
    for doc in documents:
        if not isinstance(doc, str):
            raise TypeError(f"training text must be a str or an iterable of str, found {type(doc).__name__}")
    check_int("vocab_size", vocab_size)
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(
            f"vocab_size={vocab_size!r} is too small: it needs the 256 byte tokens plus "
            f"{len(special_tokens)} special token(s), so at least {256 + len(special_tokens)}"
        )
    if special_tokens:
        cut = regex.compile("|".join(regex.escape(name) for name in sorted(special_tokens, key=len, reverse=True)))
        documents = [piece for doc in documents for piece in cut.split(doc)]
    if not any(documents):
        raise ValueError("the training text is empty: give at least some text to learn merges from")
    n_merges = vocab_size - 256 - len(special_tokens)
    if trainer == "fast":
        pairs = train_fast(count_chunks(documents, pattern), n_merges, progress=check_bool("progress", progress))
    elif trainer == "reference":
        pairs = train_reference(split_chunks(documents, pattern), n_merges)
    else:
        raise ValueError(f"trainer must be 'fast' or 'reference', not {trainer!r}")
    if len(pairs) < n_merges:
        raise ValueError(
            f"the training text ran out of pairs to merge after {len(pairs)} merges, so it can't "
            f"fill vocab_size={vocab_size}; use vocab_size <= {256 + len(pairs) + len(special_tokens)} "
            f"or more text"
        )
    return pairs


def split_chunks(documents: Iterable[str], pattern: str | None) -> list[str]:
    """Cut every document into chunks with ``pattern``: every occurrence, in text order.

    ``pattern=None`` keeps each non-empty document whole, as one chunk.
    """
    split = splitter(pattern)
    return [chunk for doc in documents for chunk in split(doc)]


def count_chunks(documents: Iterable[str], pattern: str | None) -> Counter[str]:
    """Cut every document into chunks with ``pattern`` and count how often each distinct chunk occurs.

    The same counts as ``Counter(split_chunks(documents, pattern))``, without holding every chunk.
    """
    counts: Counter[str] = Counter()
    split = splitter(pattern)
    for doc in documents:
        counts.update(split(doc))
    return counts


def chunks_as_bytes(chunk_counts: Counter[str]) -> tuple[list[list[int]], list[int]]:
    """Each distinct chunk as its list of UTF-8 byte values, with its number of occurrences."""
    words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
    return words, list(chunk_counts.values())


def merge_pair(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair`` in ``ids`` (left to right) by ``new_id``."""
    left, right = pair
    merged = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == left and i + 1 < n and ids[i + 1] == right:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def best_pair(pair_counts: dict[Pair, int]) -> Pair:
    """The pair to merge next: the highest count, ties to the smallest ``(left, right)``."""
    return min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))


def train_reference(chunks: Iterable[str], n_merges: int) -> list[Pair]:
    """Readable BPE: count every pair in every chunk, merge the most frequent one everywhere, repeat.

    ``chunks`` is the text cut into chunks, every occurrence (see :func:`split_chunks`). Returns
    the merges in order; merge ``i`` creates token id ``256 + i``. Stops early if no pair is left
    (every chunk is already a single token).
    """
    if isinstance(chunks, (str, Mapping)):
        raise TypeError(
            "train_reference takes the list of chunks, every occurrence: bpe.split_chunks(documents, pattern). "
            "Chunk counts (bpe.count_chunks) are what train_fast takes."
        )
    words = [list(chunk.encode("utf-8")) for chunk in chunks]
    merges: list[Pair] = []
    for step in range(n_merges):
        pair_counts: Counter[Pair] = Counter()
        for ids in words:
            pair_counts.update(zip(ids, ids[1:]))
        if not pair_counts:
            break
        pair = best_pair(pair_counts)
        new_id = 256 + step
        words = [merge_pair(ids, pair, new_id) for ids in words]
        merges.append(pair)
    return merges


def train_fast(chunk_counts: Counter[str], n_merges: int, *, progress: bool = False) -> list[Pair]:
    """The same merges as :func:`train_reference`, from chunk counts, without recounting at each step.

    ``chunk_counts`` holds each distinct chunk once with its number of occurrences (see
    :func:`count_chunks`), so a word that appears a thousand times is merged once, with weight
    1000. Three more ideas make it fast, all in plain Python:

    * pair counts are kept up to date: a merge only changes the chunks that contain the pair,
      so we subtract those chunks' old pairs and add their new ones;
    * an index ``pair -> chunks that contain it`` says which chunks those are (it may list a
      chunk twice, or one that has since lost the pair: visiting it again changes nothing);
    * a heap holds ``(-count, pair)``, so the best pair (highest count, then smallest pair) is on
      top. When a count drops we don't search the heap: the old entry stays, and when it reaches
      the top we see that its count is out of date and push it back with the current count
      ("lazy invalidation"). This is exact because a pair's count can only grow in the step
      that creates its new token, and that step pushes a fresh entry.
    """
    words, weights = chunks_as_bytes(chunk_counts)
    pair_counts: defaultdict[Pair, int] = defaultdict(int)
    chunks_with: defaultdict[Pair, list[int]] = defaultdict(list)
    for index, (ids, weight) in enumerate(zip(words, weights)):
        for pair in zip(ids, ids[1:]):
            pair_counts[pair] += weight
            chunks_with[pair].append(index)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)

    bar = _progress_bar(n_merges) if progress else None
    merges: list[Pair] = []
    while len(merges) < n_merges and heap:
        negative_count, pair = heapq.heappop(heap)
        count = pair_counts.get(pair, 0)
        if -negative_count != count:  # stale entry: requeue with the true count
            if count > 0:
                heapq.heappush(heap, (-count, pair))
            continue
        new_id = 256 + len(merges)
        merges.append(pair)
        for new_pair in _apply_merge(pair, new_id, words, weights, pair_counts, chunks_with):
            if pair_counts[new_pair] > 0:  # a pair made and undone in the same merge ("éé") stays out
                heapq.heappush(heap, (-pair_counts[new_pair], new_pair))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return merges


def _apply_merge(pair, new_id, words, weights, pair_counts, chunks_with) -> set[Pair]:
    """Merge ``pair`` in every chunk that has it, fixing the counts; return the pairs it created.

    A merge at one position changes only three pairs: ``(before, left)`` becomes
    ``(before, new)``, ``(right, after)`` becomes ``(new, after)``, and the pair itself is gone.
    Scanning left to right, ``before`` may be the token this same merge just made ("a a a a" ->
    "aa aa"); the bookkeeping stays exact because that pair was added a moment earlier.

    Each chunk is visited once, however often the index lists it, and ``list.count`` and
    ``list.index`` (in C) jump straight to the candidates; the chunk is edited after the scan,
    in place for a few pairs and rebuilt (:func:`_replace_pairs`) for many, so a long chunk costs
    one pass per merge, not one per occurrence.
    """
    left, right = pair
    created: defaultdict[Pair, list[int]] = defaultdict(list)  # new pairs -> chunks that have them
    visited = -1
    for index in chunks_with.pop(pair):
        if index == visited:  # listed once per occurrence, side by side (a revisit would find nothing)
            continue
        visited = index
        ids, weight = words[index], weights[index]
        n, i, last_end = len(ids), 0, -1  # last_end: where the previous merge in this chunk ended
        positions = []
        unvisited = ids.count(left)
        while unvisited:
            i = ids.index(left, i)
            unvisited -= 1
            if i + 1 >= n or ids[i + 1] != right:
                i += 1
                continue
            if i > 0:
                before = new_id if i == last_end else ids[i - 1]
                pair_counts[before, left] -= weight
                pair_counts[before, new_id] += weight
                created[before, new_id].append(index)
            if i + 2 < n:
                after = ids[i + 2]
                pair_counts[right, after] -= weight
                pair_counts[new_id, after] += weight
                created[new_id, after].append(index)
            positions.append(i)
            last_end = i = i + 2
            if right == left:  # the right half was an occurrence of `left` too
                unvisited -= 1
        if len(positions) > 16:  # many: rebuild the list in one pass
            words[index] = _replace_pairs(ids, positions, new_id)
        else:  # a few: edit in place, from the right so earlier positions stay valid
            for i in reversed(positions):
                ids[i : i + 2] = [new_id]
    del pair_counts[pair]  # every occurrence was merged
    chunks_with.update(created)  # pairs with the new token are new keys: nothing to combine
    return set(created)


def _replace_pairs(ids: list[int], positions: list[int], new_id: int) -> list[int]:
    """A new list: ``ids`` with the pair at each of ``positions`` (ascending) replaced by ``new_id``.

    Built from slices, so it costs one pass over the chunk instead of one per replaced pair.
    """
    merged, start = [], 0
    for i in positions:
        merged += ids[start:i]
        merged.append(new_id)
        start = i + 2
    merged += ids[start:]
    return merged


def _progress_bar(total: int):
    from llmkit.progress import progress_bar  # imported here: only needed when a learner asks for a bar

    return progress_bar(total=total, desc="BPE merges", unit="merge")
