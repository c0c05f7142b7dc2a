"""The tokenizer file: one versioned JSON document a person can read.

```
{"format": "llmkit-tokenizer", "version": 1,
 "pattern": "<the pre-split regex, or null>",
 "byte_ids": [0, 1, ..., 255],           the id of each single byte (tiktoken's files order them differently)
 "special_tokens": {"<|endoftext|>": 2032, ...},
 "merges": [[256, " ", "t"], [257, "h", "e"], ...]}   new id, left piece, right piece, in merge order
```

Token bytes are written as text where they are valid UTF-8; any other byte appears as ``\\xNN``
and a literal backslash as ``\\\\``, so a token that holds half of a multi-byte character is
still exact and readable. Loading only parses JSON: no code runs, whatever the file contains.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

FORMAT = "llmkit-tokenizer"
VERSION = 1
_ESCAPE = re.compile(rb"\\(\\|x[0-9a-f]{2})")


def bytes_to_text(token: bytes) -> str:
    """Readable, reversible text for token bytes (see the module docstring)."""
    return token.replace(b"\\", b"\\\\").decode("utf-8", errors="backslashreplace")


def text_to_bytes(text: str) -> bytes:
    """Inverse of :func:`bytes_to_text`."""

    def unescape(match: re.Match) -> bytes:
        code = match.group(1)
        return b"\\" if code == b"\\" else bytes([int(code[1:], 16)])

    return _ESCAPE.sub(unescape, text.encode("utf-8"))


def save(tokenizer, path: str | Path) -> None:
    """Write ``tokenizer`` to ``path`` (atomically: a crash never leaves half a file)."""
    ranks = tokenizer.mergeable_ranks
    vocab = {token_id: token for token, token_id in ranks.items()}
    merges = [
        [new_id, bytes_to_text(vocab[left]), bytes_to_text(vocab[right])]
        for (left, right), new_id in tokenizer.merges.items()
    ]
    header = {
        "format": FORMAT,
        "version": VERSION,
        "pattern": tokenizer.pattern,
        "byte_ids": [ranks[bytes([b])] for b in range(256)],
        "special_tokens": tokenizer.special_tokens,
    }
    # One field, and one merge, per line keeps the file (and its git diffs) readable.
    fields = [f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}" for key, value in header.items()]
    merge_lines = ",\n".join(f"  {json.dumps(merge, ensure_ascii=False)}" for merge in merges)
    fields.append(f' "merges": [\n{merge_lines}\n ]' if merges else ' "merges": []')
    text = "{\n" + ",\n".join(fields) + "\n}\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    os.chmod(tmp.name, 0o644)  # NamedTemporaryFile makes private files; a tokenizer is meant to be shared
    os.replace(tmp.name, path)


def load(cls, path: str | Path):
    """Read a tokenizer file; a clear error names the file if it is corrupt or too new."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a valid llmkit tokenizer file (not JSON: {exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not an llmkit tokenizer file (missing \"format\": \"{FORMAT}\")")
    version = document.get("version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"{path} has an invalid format version {version!r}")
    if version > VERSION:
        raise ValueError(
            f"{path} uses tokenizer format version {version}, but this llmkit reads version {VERSION}; "
            f"upgrade llmkit to load it"
        )
    try:
        byte_ids = document["byte_ids"]
        ranks = {bytes([b]): int(byte_ids[b]) for b in range(256)}
        vocab = {token_id: token for token, token_id in ranks.items()}
        merges = {}
        for new_id, left_text, right_text in document["merges"]:
            left, right = text_to_bytes(left_text), text_to_bytes(right_text)
            pair = (ranks[left], ranks[right])
            merges[pair] = int(new_id)
            vocab[int(new_id)] = left + right
            ranks.setdefault(left + right, int(new_id))
        specials = {str(name): int(token_id) for name, token_id in document["special_tokens"].items()}
        return cls(ranks, pattern=document["pattern"], special_tokens=specials, merges=merges)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is a corrupt llmkit tokenizer file ({type(exc).__name__}: {exc})") from exc
