"""A byte-level BPE tokenizer: text -> token ids -> text, with GPT-4-style pre-splitting.

A ``Tokenizer`` is a table of *mergeable ranks* (token bytes -> id), a pre-split regex and a
few special tokens. Encoding works like tiktoken: cut the text into chunks with the regex, write
each chunk as its UTF-8 bytes, then keep joining the neighbouring pair whose joined bytes have
the lowest rank (the earliest merge learned) until no pair is in the table. Each distinct chunk
is encoded once and remembered, so encoding a large corpus is mostly dictionary look-ups.

Special tokens (``<|endoftext|>``, the chat markers) are control signals. Text a user typed must
never turn into them by accident, so by default ``encode`` refuses text that contains them, as
tiktoken does; the caller says explicitly which ones are allowed (:mod:`llmkit.tokens.special`).

The methods learners know from ``tiktoken.Encoding`` work the same way here (``encode_batch``,
``encode_single_token``, ``decode_with_offsets``, ``eot_token``, ...), with these deliberate
differences:

* a lone surrogate (half of a UTF-16 pair, e.g. ``"\\ud83d"``) is refused with a ``ValueError``
  that shows how to repair the text; tiktoken silently encodes it as U+FFFD, changing the text;
* ``num_threads`` is accepted but the work runs in the calling thread (pure Python: the GIL
  would serialise threads), and a batch method given one str, not a list, raises ``TypeError``;
* an unknown id raises ``UnknownTokenError``, both a ``KeyError`` (as in tiktoken) and a
  ``ValueError``; decoding also accepts numpy arrays and torch tensors of ids;
* a custom pre-split pattern is probed and time-limited, and the vocabulary's ids are checked,
  when the tokenizer is built (:mod:`llmkit.tokens.pattern`, :mod:`llmkit.tokens.vocab`);
* ``vocab_size`` is tiktoken's ``n_vocab``.

BPE inside one chunk lives in :mod:`llmkit.tokens.merge`, training in :mod:`llmkit.tokens.bpe`,
and the JSON file format in :mod:`llmkit.tokens.file`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from llmkit.checks import check_int
from llmkit.tokens import bpe
from llmkit.tokens.merge import merge_chunk, recover_merges
from llmkit.tokens.pattern import NAMED_PATTERNS, resolve_pattern, splitter
from llmkit.tokens.special import SpecialSet, alternation, refuse_disallowed, resolve_names
from llmkit.tokens.vocab import build_vocab

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
CACHED_CHUNK_CHARS = 256  # longer chunks (rare: a run of one character) are encoded, not remembered


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
        self._vocab = build_vocab(mergeable_ranks, merges, dict(special_tokens or {}))
        self._ranks = dict(mergeable_ranks)
        self._merges = dict(merges) if merges is not None else None
        self._special = dict(special_tokens or {})
        self._vocab_size = max(self._vocab) + 1
        self._pattern = resolve_pattern(pattern)
        self._split = splitter(self._pattern)
        self._special_regex = alternation(frozenset(self._special))
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
        special_tokens = _special_token_list(special_tokens)
        pattern = resolve_pattern(pattern)
        pairs = bpe.train_merges(text, vocab_size, pattern=pattern, special_tokens=special_tokens,
                                 trainer=trainer, progress=progress)
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
        chunks = self._split(text)
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
        allowed = resolve_names(allowed_special, self._special, "allowed_special")
        if disallowed_special == "all":
            disallowed = set(self._special) - allowed
        else:
            disallowed = resolve_names(disallowed_special, self._special, "disallowed_special")
        if not self._special or self._special_regex.search(text) is None:
            return self.encode_ordinary(text)  # the common case: no special-token text at all
        refuse_disallowed(text, disallowed)
        if not allowed:
            return self.encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for match in alternation(frozenset(allowed)).finditer(text):
            ids += self.encode_ordinary(text[start : match.start()])
            ids.append(self._special[match.group()])
            start = match.end()
        ids += self.encode_ordinary(text[start:])
        return ids

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        num_threads: int = 8,
        allowed_special: SpecialSet = frozenset(),
        disallowed_special: SpecialSet = "all",
    ) -> list[list[int]]:
        """``encode`` for each text. ``num_threads`` is accepted so tiktoken code runs unchanged;
        the encoder is pure Python, so it works in this thread (the GIL would serialise threads)."""
        check_int("num_threads", num_threads, minimum=1)
        kwargs = {"allowed_special": allowed_special, "disallowed_special": disallowed_special}
        return [self.encode(text, **kwargs) for text in _texts(texts)]

    def encode_ordinary_batch(self, texts: Sequence[str], *, num_threads: int = 8) -> list[list[int]]:
        """``encode_ordinary`` for each text (``num_threads`` as in ``encode_batch``)."""
        check_int("num_threads", num_threads, minimum=1)
        return [self.encode_ordinary(text) for text in _texts(texts)]

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of a text (or bytes) that is exactly one token, ordinary or special; else ``KeyError``."""
        piece = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) else text_or_bytes
        if not isinstance(piece, bytes):
            raise TypeError(f"encode_single_token takes a str or bytes, not {type(text_or_bytes).__name__}")
        if piece in self._ranks:
            return self._ranks[piece]
        name = piece.decode("utf-8", errors="replace")
        if name in self._special:
            return self._special[name]
        raise KeyError(f"{text_or_bytes!r} is not a single token; encode() splits text into its tokens")

    def _encode_new_chunk(self, chunk: str, text: str) -> list[int]:
        """BPE for a chunk not in the cache, remembered for next time (the cache starts over when full)."""
        try:
            piece = chunk.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _surrogate_error(text) from exc
        ids = merge_chunk(piece, self._ranks)
        if len(chunk) <= CACHED_CHUNK_CHARS:
            if len(self._cache) >= CHUNK_CACHE_LIMIT:
                self._cache.clear()
            self._cache[chunk] = ids
        return ids

    # ----------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes the ids stand for, joined."""
        return b"".join(self.decode_tokens_bytes(ids))

    def decode_tokens_bytes(self, ids: Iterable[int]) -> list[bytes]:
        """The bytes of each token, one entry per id (a character may be split across entries)."""
        ids = ids.tolist() if hasattr(ids, "tolist") else ids  # numpy arrays and torch tensors
        ids = ids if isinstance(ids, (list, tuple)) else list(ids)
        try:
            return list(map(self._vocab.__getitem__, ids))
        except (KeyError, TypeError):
            raise self._unknown(next(i for i in ids if not self._is_id(i))) from None

    def _is_id(self, token_id) -> bool:
        try:
            # numpy integers are ids too; True and 1.0 only compare equal to one
            return not isinstance(token_id, (bool, float)) and token_id in self._vocab
        except TypeError:  # unhashable, e.g. a nested list
            return False

    def _unknown(self, token_id) -> UnknownTokenError:
        return UnknownTokenError(f"token id {token_id!r} is not in the vocabulary (valid ids are "
                                 f"0..{self.vocab_size - 1}, less any unused ones)")

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Ids back to text. Bytes that are not valid UTF-8 (a token cut mid-character) become U+FFFD;
        ``errors`` is Python's choice for them ("replace", "strict", "ignore", "backslashreplace")."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_batch(self, batch: Sequence[Iterable[int]], *, errors: str = "replace", num_threads: int = 8) -> list[str]:
        """``decode`` for each list of ids (``num_threads`` as in ``encode_batch``)."""
        check_int("num_threads", num_threads, minimum=1)
        return [self.decode(ids, errors=errors) for ids in batch]

    def decode_with_offsets(self, ids: Iterable[int]) -> tuple[str, list[int]]:
        """The text and, for each token, the index of the character where it starts.

        A token that starts inside a multi-byte character (a UTF-8 continuation byte, 0x80-0xBF)
        is given that character's index. The ids must decode to valid UTF-8.
        """
        pieces = self.decode_tokens_bytes(ids)
        offsets, characters = [], 0  # characters started so far
        for piece in pieces:
            starts_mid_character = 0x80 <= piece[0] < 0xC0
            offsets.append(characters - 1 if starts_mid_character and characters else characters)
            characters += sum(1 for byte in piece if not 0x80 <= byte < 0xC0)
        return b"".join(pieces).decode("utf-8", errors="strict"), offsets

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token; an id that names no token raises ``KeyError`` (as tiktoken does)."""
        if not self._is_id(token_id):
            raise self._unknown(token_id)
        return self._vocab[token_id]

    # ----------------------------------------------------------------- properties
    @property
    def vocab_size(self) -> int:
        """One more than the largest id (ids are 0 .. vocab_size - 1), as in tiktoken's ``n_vocab``."""
        return self._vocab_size

    @property
    def max_token_value(self) -> int:
        """The largest id in use (tiktoken's name); ``vocab_size`` is one more."""
        return self._vocab_size - 1

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special)

    @property
    def special_tokens_set(self) -> set[str]:
        """The special tokens' names."""
        return set(self._special)

    @property
    def eot_token(self) -> int:
        """The id of ``<|endoftext|>``, the end-of-text marker between documents."""
        if "<|endoftext|>" not in self._special:
            raise KeyError(f"this tokenizer has no <|endoftext|> token; its special tokens are {sorted(self._special)}")
        return self._special["<|endoftext|>"]

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


class UnknownTokenError(KeyError, ValueError):
    """An id that names no token: a ``KeyError`` as in tiktoken, and a ``ValueError`` (a bad argument)."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


def _special_token_list(special_tokens) -> list[str]:
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a list of strings, e.g. [{special_tokens!r}]")
    special_tokens = list(special_tokens or [])
    if len(set(special_tokens)) != len(special_tokens) or not all(s and isinstance(s, str) for s in special_tokens):
        raise ValueError("special_tokens must be distinct, non-empty strings")
    return special_tokens


def _texts(texts: Sequence[str]) -> Sequence[str]:
    if isinstance(texts, str):
        raise TypeError("a batch method takes a list of texts, not one str; wrap it: [text]")
    return texts


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
    for name, known in NAMED_PATTERNS.items():
        if pattern == known:
            return repr(name)
    return "None" if pattern is None else "custom"
