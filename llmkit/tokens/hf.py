"""Our tokenizer in Hugging Face's format: ``tokenizer.json`` for the ``tokenizers`` library.

Hugging Face describes a tokenizer as a pipeline of parts: a pre-tokenizer that cuts text into
chunks (our regex), a byte-level step that writes each byte as one printable character (so a
vocabulary of *strings* can hold every byte), and a BPE model with a vocabulary and merges.
Engines such as vLLM and TGI read that file, so a course model exported with it tokenizes the
same there as here.

Two differences between the engines need care, and both are handled here:

- **Ranks versus merges.** We (like tiktoken) join the neighbouring pair whose *joined bytes* have
  the lowest rank; Hugging Face's BPE joins the pair listed earliest in its merge list. Listing,
  for every token, each way of cutting it into two tokens, in the token's rank order, makes the
  two rules pick the same pair. A chunk that is a whole token is taken at once in both
  (``ignore_merges``).
- **Two regex engines.** ``tokenizers`` runs Oniguruma, which reads some of Python's ``regex``
  syntax differently: a possessive interval ``\\p{N}{1,3}+`` is "one to three digits, repeated",
  and ``$`` means the end of a *line*. ``oniguruma_pattern`` rewrites both into forms that mean
  the same in either engine (an atomic group ``(?>\\p{N}{1,3})`` and ``\\Z``).
"""
from __future__ import annotations

import functools
from typing import Any

SPECIAL_TOKEN_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}


@functools.lru_cache(maxsize=1)
def byte_to_char() -> dict[int, str]:
    """One printable character per byte, as GPT-2's byte-level BPE writes them.

    Bytes that are already visible characters stand for themselves; the others (controls,
    space, a few Latin-1 gaps) are moved to code points from 256 up, in order. So a space
    becomes "Ġ" and a newline "Ċ", and a token's bytes can be stored as an ordinary string.
    """
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in visible}
    moved = (b for b in range(256) if b not in mapping)
    mapping.update({b: chr(256 + n) for n, b in enumerate(moved)})
    return mapping


def token_text(token: bytes) -> str:
    """A token's bytes in the byte-level alphabet (the form ``tokenizer.json`` stores)."""
    table = byte_to_char()
    return "".join(table[b] for b in token)


def oniguruma_pattern(pattern: str) -> str:
    """Rewrite a Python ``regex`` pattern so that Oniguruma (``tokenizers``) splits text the same way.

    Possessive intervals ``X{m,n}+`` become atomic groups ``(?>X{m,n})``, and ``$`` (end of the
    text, or before a final newline, in Python) becomes ``\\Z``, which means exactly that in
    Oniguruma. Everything else in the GPT-2 and GPT-4 patterns means the same in both engines.
    """
    out: list[str] = []
    atom_start: int | None = 0  # where in ``out`` the last complete atom begins (None: it was a group)
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            end = pattern.index("}", i) + 1 if pattern[i + 1:i + 3] in ("p{", "P{") else i + 2
            if not in_class:
                atom_start = len(out)
            out.append(pattern[i:end])
            i = end
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            atom_start, in_class = len(out), True
        elif char == "$":
            atom_start = len(out)
            out.append(r"\Z")
            i += 1
            continue
        elif char == "{" and _possessive_interval(pattern, i):
            interval = pattern[i:pattern.index("}", i) + 1]
            if atom_start is None or atom_start >= len(out):
                raise ValueError(f"pattern {pattern!r} has a possessive interval after a group at character {i}; "
                                 "Oniguruma reads it differently: write it as an atomic group (?>...{m,n})")
            atom = "".join(out[atom_start:])
            del out[atom_start:]
            out.append(f"(?>{atom}{interval})")
            i += len(interval) + 1
            continue
        elif char == ")":
            atom_start = None  # a group: rewriting it would need a parser, so refuse below
        elif char not in "+*?|(":
            atom_start = len(out)
        out.append(char)
        i += 1
    return "".join(out)


def _possessive_interval(pattern: str, start: int) -> bool:
    """Whether ``pattern[start:]`` begins with ``{m}``, ``{m,}`` or ``{m,n}`` followed by ``+``."""
    end = pattern.find("}", start)
    body = pattern[start + 1:end] if end > 0 else ""
    return (end > 0 and body.replace(",", "").isdigit() and body.count(",") <= 1
            and pattern[end + 1:end + 2] == "+")


def hf_merges(ranks: dict[bytes, int]) -> list[list[str]]:
    """Every cut of every token into two tokens, ordered by the rank of the joined token.

    Hugging Face's BPE can only join pairs it finds in this list; our encoder may join any two
    neighbouring tokens whose bytes together are a token. Listing all such pairs, lowest joined
    rank first, gives both encoders the same choice at every step.
    """
    pairs = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                pairs.append((rank, ranks[left], ranks[right], left, right))
    pairs.sort()
    return [[token_text(left), token_text(right)] for *_, left, right in pairs]


def tokenizer_json(tokenizer) -> dict[str, Any]:
    """The ``tokenizer.json`` document (``tokenizers`` format) for an llmkit ``Tokenizer``."""
    ranks = tokenizer.mergeable_ranks
    duplicates = _repeated_tokens(tokenizer, set(ranks.values()) | set(tokenizer.special_tokens.values()))
    if duplicates:
        raise ValueError(f"token ids {duplicates[:8]} repeat the bytes of earlier tokens; Hugging Face's vocabulary "
                         "maps each string to one id, so this tokenizer cannot be exported as it is")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    steps = [byte_level]
    if tokenizer.pattern is not None:
        split = {"type": "Split", "pattern": {"Regex": oniguruma_pattern(tokenizer.pattern)},
                 "behavior": "Isolated", "invert": False}
        steps = [split, byte_level]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": token_id, "content": name, **SPECIAL_TOKEN_FLAGS}
                         for name, token_id in sorted(tokenizer.special_tokens.items(), key=lambda item: item[1])],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": steps},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": _vocab(ranks, tokenizer.special_tokens),
            "merges": hf_merges(ranks),
        },
    }


def _vocab(ranks: dict[bytes, int], special_tokens: dict[str, int]) -> dict[str, int]:
    """Token text -> id, special tokens included: ``tokenizers`` gives an added token that is not in
    the vocabulary the next free id, which is wrong when the ids have gaps (cl100k's do)."""
    vocab = {token_text(token): token_id for token, token_id in sorted(ranks.items(), key=lambda item: item[1])}
    clashes = sorted(name for name in special_tokens if name in vocab)
    if clashes:
        raise ValueError(f"special tokens {clashes} are also ordinary tokens in the byte-level alphabet; rename them")
    return {**vocab, **special_tokens}


def _repeated_tokens(tokenizer, known: set[int]) -> list[int]:
    """Ids that a merge gave the bytes of an earlier token (encoding never produces them). Ids
    that are simply unused, such as the gaps between cl100k's special tokens, are fine."""
    repeated = []
    for token_id in sorted(set(range(tokenizer.vocab_size)) - known):
        try:
            tokenizer.token_bytes(token_id)
        except ValueError:
            continue  # a gap: no token has this id
        repeated.append(token_id)
    return repeated


def tokenizer_config(tokenizer, *, model_max_length: int | None = None) -> dict[str, Any]:
    """``tokenizer_config.json``: which class reads ``tokenizer.json``, the special tokens, and the
    chat template as Jinja (for a tokenizer with the course's chat markers)."""
    from llmkit.tokens.hf_chat import CHAT_MARKERS, jinja_chat_template

    special = tokenizer.special_tokens
    end = "<|endoftext|>" if "<|endoftext|>" in special else None
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",  # read tokenizer.json as it is, no family defaults
        "added_tokens_decoder": {str(token_id): {"content": name, **SPECIAL_TOKEN_FLAGS}
                                 for name, token_id in sorted(special.items(), key=lambda item: item[1])},
        "bos_token": None, "eos_token": end, "pad_token": end, "unk_token": None,
        "extra_special_tokens": [name for name in sorted(special, key=special.get) if name != end],
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length if model_max_length is not None else 10**30,
    }
    if all(marker in special for marker in CHAT_MARKERS):
        config["chat_template"] = jinja_chat_template(special)
    return config
