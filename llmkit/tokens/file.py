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
import re
from pathlib import Path

from llmkit.checks import is_int
from llmkit.files import atomic_write
from llmkit.tokens.pattern import COVERAGE_PROBE

FORMAT = "llmkit-tokenizer"
VERSION = 1
ROUND_TRIP_PROBES = ["Hello, World 123!", COVERAGE_PROBE, " " * 40 + "x" * 40 + "\n\n"]
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
    atomic_write(path, text)


def load(cls, path: str | Path):
    """Read a tokenizer file; a clear error names the file if it is corrupt or too new."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a folder, a FIFO or a device would fail late or hang
        raise ValueError(f"{path} is not a regular file; give the path of a tokenizer .json file")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a valid llmkit tokenizer file (not JSON: {exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not an llmkit tokenizer file (missing \"format\": \"{FORMAT}\")")
    version = document.get("version")
    if not is_int(version) or version < 1:
        raise ValueError(f"{path} has an invalid format version {version!r}")
    if version > VERSION:
        raise ValueError(
            f"{path} uses tokenizer format version {version}, but this llmkit reads version {VERSION}; "
            f"upgrade llmkit to load it"
        )
    try:
        ranks, merges = _parts(document)
        tokenizer = cls(ranks, pattern=document["pattern"], special_tokens=_specials(document), merges=merges)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{path} is a corrupt llmkit tokenizer file: {problem}") from exc
    _check_round_trip(tokenizer, path)
    return tokenizer


def _parts(document: dict) -> tuple[dict[bytes, int], dict[tuple[int, int], int]]:
    """(ranks, merges) from the file's byte ids and merge list, every id checked to be a unique int."""
    byte_ids = document["byte_ids"]
    if not isinstance(byte_ids, list) or len(byte_ids) != 256:
        raise ValueError("\"byte_ids\" must list the ids of the 256 bytes, in byte order")
    ranks = {bytes([b]): _id(byte_ids[b], f"byte {b}") for b in range(256)}
    merges: dict[tuple[int, int], int] = {}
    merge_list = document["merges"]
    if not isinstance(merge_list, list):
        raise ValueError("\"merges\" must be a list of [new id, left piece, right piece]")
    for entry in merge_list:
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError(f"merge {entry!r} must be [new id, left piece, right piece]")
        new_id, left_text, right_text = entry
        left, right = text_to_bytes(_text(left_text, entry)), text_to_bytes(_text(right_text, entry))
        if left not in ranks or right not in ranks:
            raise ValueError(f"merge {entry!r} joins a piece that no earlier token spells")
        pair = (ranks[left], ranks[right])
        if pair in merges:
            raise ValueError(f"merge {entry!r} repeats the merge that made id {merges[pair]}: each pair is merged once")
        merges[pair] = _id(new_id, f"merge {entry!r}")
        ranks.setdefault(left + right, merges[pair])
    return ranks, merges


def _specials(document: dict) -> dict[str, int]:
    specials = document["special_tokens"]
    if not isinstance(specials, dict):
        raise ValueError("\"special_tokens\" must map each name to its id")
    return {name: _id(token_id, f"special token {name!r}") for name, token_id in specials.items()}


def _id(value, owner: str) -> int:
    if not is_int(value) or value < 0:
        raise ValueError(f"{owner} has the id {value!r}; ids must be whole numbers >= 0")
    return value


def _text(value, entry) -> str:
    if not isinstance(value, str):
        raise ValueError(f"merge {entry!r} must give its pieces as strings")
    return value


def _check_round_trip(tokenizer, path: Path) -> None:
    """Every probe text must come back exactly: a pattern or merge table that loses text is refused."""
    for probe in ROUND_TRIP_PROBES:
        back = tokenizer.decode(tokenizer.encode_ordinary(probe))
        if back != probe:
            raise ValueError(
                f"{path} does not round-trip text: {probe!r} decodes back as {back!r}. Its pattern or merges "
                f"lose text; re-save the tokenizer with a pattern that matches every character"
            )
