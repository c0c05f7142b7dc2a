"""A byte-level BPE tokenizer: text -> token ids -> text, with GPT-4-style pre-splitting.

A ``Tokenizer`` is a table of *mergeable ranks* (token bytes -> id), a pre-split regex and a
few special tokens. Encoding works like tiktoken: cut the text into chunks with the regex, write
each chunk as its UTF-8 bytes, then keep joining the neighbouring pair whose joined bytes have
the lowest rank (the earliest merge learned) until no pair is in the table. Each distinct chunk
is encoded once and remembered, so encoding a large corpus is mostly dictionary look-ups.

Special tokens (``<|endoftext|>``, the chat markers) are control signals. Text a user typed must
never turn into them by accident, so by default ``encode`` refuses text that contains them, as
tiktoken does; the caller says explicitly which ones are allowed.

Training lives in :mod:`llmkit.tokens.bpe`; the JSON file format in :mod:`llmkit.tokens.file`.
"""
from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Literal

import regex

from llmkit.tokens import bpe

# The control tokens of the course tokenizer, reserved from the start (see DEVELOPERS.md).
COURSE_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tools|>",
    "<|thinking|>",
    "<|end_thinking|>",
    "<|tool_call|>",
    "<|end_tool_call|>",
    "<|tool_result|>",
    "<|end_tool_result|>",
    "<|end_turn|>",
    "<|reserved_0|>",
    "<|reserved_1|>",
    "<|reserved_2|>",
    "<|reserved_3|>",
]
CHUNK_CACHE_LIMIT = 500_000  # distinct chunks remembered before the cache starts over

SpecialSet = Literal["all"] | Collection[str]


class Tokenizer:
    """Byte-level BPE tokenizer with tiktoken's encoding rules (see the module docstring)."""

    def __init__(
        self,
        mergeable_ranks: dict[bytes, int],
        *,
        pattern: str | None = "gpt4",
        special_tokens: dict[str, int] | None = None,
        merges: dict[tuple[int, int], int] | None = None,
    ):
        """Build from ranks (token bytes -> id). ``merges`` (pair of ids -> new id, in order) is
        recovered from the ranks when not given. Most code uses ``train``, ``load`` or
        ``from_tiktoken`` instead of calling this directly."""
        missing = [b for b in range(256) if bytes([b]) not in mergeable_ranks]
        if missing:
            raise ValueError(f"mergeable_ranks lacks the byte(s) {missing[:8]}; a byte-level BPE needs all 256")
        self._ranks = dict(mergeable_ranks)
        self._vocab: dict[int, bytes] = {rank: token for token, rank in self._ranks.items()}
        if len(self._vocab) != len(self._ranks):
            raise ValueError("mergeable_ranks gives two tokens the same id")
        self._merges = dict(merges) if merges is not None else None
        for (left, right), new_id in (self._merges or {}).items():  # a merge can repeat an earlier token
            self._vocab.setdefault(new_id, self._vocab[left] + self._vocab[right])
        self._special = dict(special_tokens or {})
        clashes = sorted(set(self._special.values()) & set(self._vocab))
        if clashes:
            raise ValueError(f"special token id(s) {clashes[:8]} are already ids of ordinary tokens")
        for name, token_id in self._special.items():
            self._vocab[token_id] = name.encode("utf-8")
        self._vocab_size = max(self._vocab) + 1
        self._pattern = bpe.resolve_pattern(pattern)
        self._findall = regex.compile(self._pattern).findall if self._pattern is not None else None
        self._special_regex = _alternation(frozenset(self._special))
        self._cache: dict[str, list[int]] = {}  # chunk text -> its ids, filled as chunks are met

    # ----------------------------------------------------------------- training
    @classmethod
    def train(
        cls,
        text: str | Iterable[str],
        vocab_size: int,
        *,
        pattern: str | None = "gpt4",
        special_tokens: list[str] | None = None,
        progress: bool = False,
        trainer: Literal["fast", "reference"] = "fast",
    ) -> Tokenizer:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from ``text`` (a str or documents).

        Special tokens take the last ids of the vocabulary; their text is cut out of the training
        documents, so they never take part in a merge. ``pattern=None`` skips the pre-split (each
        document, and later each text to encode, is one chunk: fine for demos, slow on long text).
        ``trainer="reference"`` uses the slow, readable trainer; both give the same merges.
        """
        if isinstance(special_tokens, str):
            raise TypeError(f"special_tokens must be a list of strings, e.g. [{special_tokens!r}]")
        special_tokens = list(special_tokens or [])
        documents = [text] if isinstance(text, str) else list(text)
        for doc in documents:
            if not isinstance(doc, str):
                raise TypeError(f"training text must be a str or an iterable of str, found {type(doc).__name__}")
        if len(set(special_tokens)) != len(special_tokens) or not all(s and isinstance(s, str) for s in special_tokens):
            raise ValueError("special_tokens must be distinct, non-empty strings")
        if not isinstance(vocab_size, int) or vocab_size < 256 + len(special_tokens):
            raise ValueError(
                f"vocab_size={vocab_size!r} is too small: it needs the 256 byte tokens plus "
                f"{len(special_tokens)} special token(s), so at least {256 + len(special_tokens)}"
            )
        if special_tokens:  # cut documents at special-token text
            splitter = _alternation(frozenset(special_tokens))
            documents = [piece for doc in documents for piece in splitter.split(doc)]
        if not any(documents):
            raise ValueError("the training text is empty: give at least some text to learn merges from")
        pattern = bpe.resolve_pattern(pattern)
        n_merges = vocab_size - 256 - len(special_tokens)
        if trainer == "fast":
            pairs = bpe.train_fast(bpe.count_chunks(documents, pattern), n_merges, progress=progress)
        elif trainer == "reference":
            pairs = bpe.train_reference(bpe.split_chunks(documents, pattern), n_merges)
        else:
            raise ValueError(f"trainer must be 'fast' or 'reference', not {trainer!r}")
        if len(pairs) < n_merges:
            raise ValueError(
                f"the training text ran out of pairs to merge after {len(pairs)} merges, so it can't "
                f"fill vocab_size={vocab_size}; use vocab_size <= {256 + len(pairs) + len(special_tokens)} "
                f"or more text"
            )
        return cls.from_merges(pairs, pattern=pattern, special_tokens=special_tokens)

    @classmethod
    def from_merges(
        cls, pairs: list[tuple[int, int]], *, pattern: str | None = "gpt4", special_tokens: Sequence[str] = ()
    ) -> Tokenizer:
        """Tokenizer from trained merges (merge ``i`` makes id ``256 + i``); specials follow them."""
        merges = {pair: 256 + i for i, pair in enumerate(pairs)}
        vocab = {i: bytes([i]) for i in range(256)}
        ranks = {token: i for i, token in vocab.items()}
        for (left, right), new_id in merges.items():
            vocab[new_id] = vocab[left] + vocab[right]
            ranks.setdefault(vocab[new_id], new_id)  # a repeated token keeps its first (lower) rank
        first_special = 256 + len(pairs)
        specials = {name: first_special + i for i, name in enumerate(special_tokens)}
        return cls(ranks, pattern=pattern, special_tokens=specials, merges=merges)

    # ----------------------------------------------------------------- encoding
    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` treating special-token text as ordinary text.

        This is the hot path: one regex pass cuts the text into chunks, and each chunk's ids
        come from the chunk cache, so on familiar text the loop is one dict look-up and one list
        extend per chunk. Only a chunk never seen before runs BPE.
        """
        _check_text(text)
        chunks = self._findall(text) if self._findall is not None else [text] if text else []
        cached_ids = self._cache.get  # bound once, not looked up again for every chunk
        ids: list[int] = []
        for chunk in chunks:
            chunk_ids = cached_ids(chunk)
            if chunk_ids is None:
                chunk_ids = self._encode_new_chunk(chunk, text)
            ids += chunk_ids
        return ids

    def encode(
        self, text: str, *, allowed_special: SpecialSet = frozenset(), disallowed_special: SpecialSet = "all"
    ) -> list[int]:
        """Encode ``text`` with tiktoken's rules for special tokens.

        Special-token text that is neither allowed nor explicitly permitted as plain text raises
        ``ValueError``. ``allowed_special="all"`` (or a set of names) turns it into the control id;
        ``disallowed_special=()`` encodes it as ordinary text.
        """
        _check_text(text)
        allowed = self._special_names(allowed_special, "allowed_special")
        if disallowed_special == "all":
            disallowed = set(self._special) - allowed
        else:
            disallowed = self._special_names(disallowed_special, "disallowed_special")
        if not self._special or self._special_regex.search(text) is None:
            return self.encode_ordinary(text)  # the common case: no special-token text at all
        if disallowed:
            found = _alternation(frozenset(disallowed)).search(text)
            if found:
                raise ValueError(
                    f"the text contains the special token {found.group()!r} (at character {found.start()}). "
                    f"Special tokens are control signals, so user text may not produce them by accident. "
                    f"Pass allowed_special={{{found.group()!r}}} to encode it as the control token, or "
                    f"disallowed_special=() to encode it as ordinary text."
                )
        if not allowed:
            return self.encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for match in _alternation(frozenset(allowed)).finditer(text):
            ids += self.encode_ordinary(text[start : match.start()])
            ids.append(self._special[match.group()])
            start = match.end()
        ids += self.encode_ordinary(text[start:])
        return ids

    def encode_batch(self, texts: Iterable[str], **kwargs) -> list[list[int]]:
        """``encode`` for each text (same keyword arguments)."""
        return [self.encode(text, **kwargs) for text in texts]

    def _encode_new_chunk(self, chunk: str, text: str) -> list[int]:
        """BPE for a chunk not in the cache, remembered for next time (the cache starts over when full)."""
        try:
            piece = chunk.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _surrogate_error(text) from exc
        if len(self._cache) >= CHUNK_CACHE_LIMIT:
            self._cache.clear()
        ids = self._cache[chunk] = self._encode_chunk(piece)
        return ids

    def _encode_chunk(self, piece: bytes) -> list[int]:
        """BPE inside one chunk: repeatedly join the neighbouring pair with the lowest rank."""
        ranks = self._ranks
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

    def _special_names(self, names: SpecialSet, argument: str) -> set[str]:
        if names == "all":
            return set(self._special)
        if isinstance(names, str):
            raise TypeError(
                f"{argument} must be 'all' or a collection of special-token strings, not the string {names!r}"
            )
        unknown = set(names) - set(self._special)
        if unknown:
            raise ValueError(
                f"{argument} names {sorted(unknown)}, which are not special tokens of this tokenizer; "
                f"it has {sorted(self._special)}"
            )
        return set(names)

    # ----------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes the ids stand for, joined."""
        ids = ids.tolist() if hasattr(ids, "tolist") else ids  # numpy arrays and torch tensors
        ids = ids if isinstance(ids, (list, tuple)) else list(ids)
        try:
            return b"".join(map(self._vocab.__getitem__, ids))
        except (KeyError, TypeError):
            bad = next(i for i in ids if not self._is_id(i))
            raise ValueError(
                f"token id {bad!r} is not in the vocabulary (valid ids are 0..{self.vocab_size - 1})"
            ) from None

    def _is_id(self, token_id) -> bool:
        try:
            return token_id in self._vocab
        except TypeError:  # unhashable, e.g. a nested list
            return False

    def decode(self, ids: Iterable[int]) -> str:
        """Ids back to text. Bytes that are not valid UTF-8 (a token cut mid-character) become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token."""
        return self.decode_bytes([token_id])

    # ----------------------------------------------------------------- properties
    @property
    def vocab_size(self) -> int:
        """One more than the largest id (ids are 0 .. vocab_size - 1), as in tiktoken's ``n_vocab``."""
        return self._vocab_size

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special)

    @property
    def merges(self) -> dict[tuple[int, int], int]:
        """(left id, right id) -> new id, in the order the merges were learned."""
        if self._merges is None:
            self._merges = recover_merges(self._ranks)
        return dict(self._merges)

    @property
    def mergeable_ranks(self) -> dict[bytes, int]:
        return dict(self._ranks)

    @property
    def pattern(self) -> str | None:
        return self._pattern

    def __repr__(self) -> str:
        pattern = _pattern_name(self._pattern)
        return f"Tokenizer(vocab_size={self.vocab_size}, special_tokens={len(self._special)}, pattern={pattern})"

    # ----------------------------------------------------------------- files and tiktoken
    def save(self, path: str | Path) -> None:
        """Write one human-readable JSON file (see :mod:`llmkit.tokens.file`)."""
        from llmkit.tokens import file as tokenizer_file

        tokenizer_file.save(self, path)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Read a file written by ``save``. Only JSON is parsed; no code runs."""
        from llmkit.tokens import file as tokenizer_file

        return tokenizer_file.load(cls, path)

    @classmethod
    def from_tiktoken(cls, name_or_encoding) -> Tokenizer:
        """An llmkit Tokenizer with a tiktoken encoding's ranks, regex and special tokens."""
        if isinstance(name_or_encoding, str):
            if name_or_encoding == "cl100k_base":
                from llmkit.tokens.cl100k import get_cl100k

                encoding = get_cl100k()
            else:
                import tiktoken

                encoding = tiktoken.get_encoding(name_or_encoding)
        else:
            encoding = name_or_encoding
        return cls(encoding._mergeable_ranks, pattern=encoding._pat_str, special_tokens=encoding._special_tokens)

    def to_tiktoken(self, name: str = "llmkit"):
        """A ``tiktoken.Encoding`` with our ranks, so its Rust engine can encode large corpora."""
        import tiktoken

        pattern = self._pattern if self._pattern is not None else r"(?s).+"
        return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=self._ranks, special_tokens=self._special)


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


@functools.lru_cache(maxsize=64)
def _alternation(names: frozenset[str]) -> regex.Pattern:
    """A regex matching any of ``names`` literally, longest first (built once per set of names)."""
    names = sorted(names, key=len, reverse=True)
    return regex.compile("|".join(regex.escape(name) for name in names) if names else r"(?!)")


def _check_text(text) -> None:
    if not isinstance(text, str):
        raise TypeError(f"expected text as a str, got {type(text).__name__}; decode bytes first (data.decode('utf-8'))")


def _surrogate_error(text: str) -> ValueError:
    index = next(i for i, ch in enumerate(text) if 0xD800 <= ord(ch) <= 0xDFFF)
    return ValueError(
        f"the text contains a lone surrogate U+{ord(text[index]):04X} at character {index}. It is half of a "
        f"UTF-16 pair, not a character, and has no UTF-8 bytes. Repair the text first, e.g. "
        f"text.encode('utf-16', 'surrogatepass').decode('utf-16', 'replace')"
    )


def _pattern_name(pattern: str | None) -> str:
    for name, known in bpe.NAMED_PATTERNS.items():
        if pattern == known:
            return repr(name)
    return "None" if pattern is None else "custom"
