"""Training data: a text corpus becomes one long array of token ids, then windows and batches.

Pretraining needs nothing fancier than this. The corpus (documents separated by the
``<|endoftext|>`` special token) is tokenised once and cached as a ``.npy`` file. A training batch
is a handful of windows cut at random offsets; the targets are the same windows shifted one token
to the left, because at every position the model is asked for the *next* token. The held-out text
is read in consecutive windows instead, so that every token is scored exactly once.

Batches are a pure function of ``(seed, step)``: step 1234 sees the same windows whether the run
started at step 0 or resumed at step 1000, on one process or split across several.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import torch

from llmkit.paths import RUNS_DIR

DOCUMENT_SEPARATOR = "<|endoftext|>"
CACHE_DIR = RUNS_DIR / "token_cache"  # runs/ in a checkout (ignored by git), else the user's cache


class Batch(NamedTuple):
    """One step's worth of training data.

    ``mask`` marks the target positions that count towards the loss. Pretraining counts every
    position (``mask is None``); fine-tuning counts only the assistant's tokens.
    """

    inputs: torch.Tensor  # (B, T) token ids
    targets: torch.Tensor  # (B, T) the next token at every position
    mask: torch.Tensor | None = None  # (B, T) bool or float weights, or None for "all positions"

    def to(self, device: torch.device | str) -> "Batch":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.inputs), move(self.targets), move(self.mask))


@dataclass
class TokenizedText:
    """A text file as token ids, plus its size in bytes (for bits per byte)."""

    path: Path | None  # None for a text that never was a file
    tokens: np.ndarray  # 1-D, uint16 when the vocabulary fits
    n_bytes: int  # UTF-8 bytes of the text the tokens encode

    def __len__(self) -> int:
        return len(self.tokens)

    def head(self, n_tokens: int, tokenizer) -> TokenizedText:
        """The first ``n_tokens`` tokens, with the exact number of bytes they stand for."""
        tokens = self.tokens[:n_tokens]
        return TokenizedText(self.path, tokens, len(tokenizer.decode_bytes(tokens.tolist())))


def read_corpus(path: str | Path) -> str:
    """Read a corpus file, with an error that names the path when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus file {path} does not exist. The course corpus lives in data/corpus/ "
            f"(rebuild it with `python data/build_corpus.py`); check the path in your config."
        )
    return path.read_text(encoding="utf-8")


def _fingerprint(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def encode_text(tokenizer, text: str) -> np.ndarray:
    """Token ids of a corpus text; ``<|endoftext|>`` becomes its special token, not 13 bytes."""
    ids = tokenizer.encode(text, allowed_special={DOCUMENT_SEPARATOR})
    dtype = np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32
    return np.asarray(ids, dtype=dtype)


def load_tokens(
    corpus_path: str | Path,
    tokenizer_path: str | Path,
    cache_dir: str | Path | None = CACHE_DIR,
) -> TokenizedText:
    """Tokenise a corpus file with a saved tokenizer, caching the ids.

    The cache file is named after a hash of both files, so editing either one re-tokenises
    instead of silently reusing stale ids. ``cache_dir=None`` turns the cache off.
    """
    from llmkit.tokens.tokenizer import Tokenizer  # floor 1; imported here to keep data.py light

    corpus_path, tokenizer_path = Path(corpus_path), Path(tokenizer_path)
    text = read_corpus(corpus_path)
    if not tokenizer_path.is_file():
        raise FileNotFoundError(f"tokenizer file {tokenizer_path} does not exist; check the path in your config.")
    n_bytes = len(text.encode("utf-8"))

    cache_file = None
    if cache_dir is not None:
        key = _fingerprint(corpus_path, tokenizer_path)
        cache_file = Path(cache_dir) / f"{corpus_path.stem}-{key}.npy"
        if cache_file.is_file():
            return TokenizedText(corpus_path, np.load(cache_file, allow_pickle=False), n_bytes)

    tokens = encode_text(Tokenizer.load(tokenizer_path), text)
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        partial = cache_file.with_name(cache_file.name + ".part.npy")
        np.save(partial, tokens, allow_pickle=False)
        partial.replace(cache_file)  # atomic: a reader never sees half a file
    return TokenizedText(corpus_path, tokens, n_bytes)


def random_batch(
    tokens: np.ndarray,
    batch_size: int,
    context_length: int,
    *,
    seed: int,
    step: int,
    rank: int = 0,
    world_size: int = 1,
) -> Batch:
    """The training batch for one step: ``batch_size`` windows at random offsets.

    ``batch_size`` is the *global* batch. With several processes each one takes its own rows
    (rank, rank + world_size, ...), so together they see exactly the batch one process would.
    Windows may span a document boundary; the ``<|endoftext|>`` token between documents teaches
    the model that what follows is unrelated to what came before.
    """
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} must be divisible by the number of processes ({world_size}).")
    if len(tokens) <= context_length + 1:
        raise ValueError(
            f"the corpus has {len(tokens)} tokens, too few for one window of {context_length + 1}; "
            f"use a bigger corpus or a smaller context_length."
        )
    rng = np.random.default_rng((seed, step))  # a fresh stream per step: resumable by construction
    starts = rng.integers(0, len(tokens) - context_length, size=batch_size)[rank::world_size]
    windows = tokens[starts[:, None] + np.arange(context_length + 1)].astype(np.int64)
    windows = torch.from_numpy(windows)
    return Batch(inputs=windows[:, :-1], targets=windows[:, 1:])


def repeated_spans(n_rows: int, context_length: int, vocab_size: int, *, seed: int, step: int,
                   span_lengths: tuple[int, int] = (4, 48), separator: int | None = None,
                   word_separator: int | None = None, word_share: float = 1.0) -> Batch:
    """Rows of random token spans, each said twice: the second saying is predictable only by copying.

    Natural text rarely rewards exact copying, and a small model pretrained on plays may never build
    the attention heads that do it ("induction heads": find the earlier occurrence of the current
    token, predict what followed it). Yet a tool call copies a name from its definition and a value
    from the question. Random ids carry no other pattern, so these rows reward that circuit alone (a
    2-layer model trained on them leaves the plateau within a few hundred steps at width 128, more
    slowly at width 320; a 6-layer one sits on it far longer, which is why the recipe grows a 2-layer
    copier: data/models/recipe/README.md has the measurements). ``separator``
    (say ``<|endoftext|>``) sometimes ends a pair, so spans are also learned as unrelated pieces.
    The first saying of each span is unpredictable, so it is left out of the loss (``mask``).

    ``word_separator`` (the space's id) makes a span *words* (``word_share`` of them): runs of 1-3
    random ids with that id between them, as text is. Then the id after a separator follows every word, so copying it needs
    the two ids before it (the word's end and the space), not one: a circuit that random spans never
    ask for, and that copying a second word of a name ("tide level") does.
    """
    if n_rows < 0 or vocab_size < 2 or not 1 <= span_lengths[0] <= span_lengths[1]:
        raise ValueError(f"repeated_spans needs n_rows >= 0, vocab_size >= 2 and 1 <= shortest <= longest span, "
                         f"got {n_rows}, {vocab_size}, {span_lengths}")
    rng = np.random.default_rng((seed, step, 0xC0B1))  # its own stream: the text windows stay unchanged
    rows, masks = [], []
    for _ in range(n_rows):
        row: list[int] = []
        counted: list[bool] = []
        while len(row) < context_length + 1:
            length = int(rng.integers(span_lengths[0], span_lengths[1] + 1))
            words = word_separator is not None and rng.random() < word_share  # no draw without words
            span = (_words(rng, length, vocab_size, word_separator) if words
                    else rng.integers(0, vocab_size, size=length).tolist())
            row += span + span
            # the second saying's first token follows the first saying's last one, which has no earlier
            # occurrence to copy from, so it does not count either
            counted += [False] * (len(span) + 1) + [True] * (len(span) - 1)
            if separator is not None and rng.random() < 0.5:
                row.append(separator)
                counted.append(False)
        rows.append(row[: context_length + 1])
        masks.append(counted[1 : context_length + 1])  # mask[t] says whether target t (row[t + 1]) counts
    windows = torch.tensor(rows, dtype=torch.int64).reshape(n_rows, context_length + 1)
    return Batch(windows[:, :-1], windows[:, 1:], torch.tensor(masks, dtype=torch.bool).reshape(n_rows, context_length))


def _words(rng: np.random.Generator, length: int, vocab_size: int, separator: int) -> list[int]:
    """``length`` ids: words of 1-3 random ids, each followed by ``separator`` (cut at ``length``)."""
    ids: list[int] = []
    while len(ids) < length:
        ids += rng.integers(0, vocab_size, size=int(rng.integers(1, 4))).tolist() + [separator]
    return ids[:length]


def sequential_batches(tokens: np.ndarray, context_length: int, batch_size: int) -> Iterator[Batch]:
    """Consecutive windows that together score every token after the first exactly once.

    Window ``k`` reads tokens ``[kT, kT + T)`` and predicts ``[kT + 1, kT + T + 1)``. Full windows
    are stacked ``batch_size`` at a time; the shorter last window comes alone at the end.
    """
    n_predicted = len(tokens) - 1
    n_full = n_predicted // context_length
    for first in range(0, n_full, batch_size):
        rows = np.arange(first, min(first + batch_size, n_full))
        windows = tokens[rows[:, None] * context_length + np.arange(context_length + 1)].astype(np.int64)
        windows = torch.from_numpy(windows)
        yield Batch(windows[:, :-1], windows[:, 1:])
    tail = tokens[n_full * context_length :].astype(np.int64)
    if len(tail) > 1:
        tail = torch.from_numpy(tail)[None, :]
        yield Batch(tail[:, :-1], tail[:, 1:])
