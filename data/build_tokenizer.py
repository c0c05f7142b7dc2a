"""Train the course tokenizer and write data/models/base/tokenizer.json.

    python data/build_tokenizer.py

Byte-level BPE with GPT-4's pre-split regex, trained on data/corpus/train.txt. The vocabulary
has 2048 ids: 256 bytes, 1776 merges, and the 16 course special tokens in the last 16 ids
(2032..2047). Documents in the corpus are separated by a line ``<|endoftext|>``; we split on it,
so special tokens never take part in a merge. Training is deterministic (ties break to the
smallest pair of ids), so re-running the script reproduces the file byte for byte.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmkit.tokens.tokenizer import COURSE_SPECIAL_TOKENS, Tokenizer  # noqa: E402

VOCAB_SIZE = 2048
CORPUS = ROOT / "data" / "corpus" / "train.txt"
OUTPUT = ROOT / "data" / "models" / "base" / "tokenizer.json"


def main() -> None:
    text = CORPUS.read_text(encoding="utf-8")
    documents = text.split("<|endoftext|>")
    start = time.perf_counter()
    tokenizer = Tokenizer.train(documents, VOCAB_SIZE, pattern="gpt4", special_tokens=COURSE_SPECIAL_TOKENS)
    seconds = time.perf_counter() - start
    tokenizer.save(OUTPUT)

    assert Tokenizer.load(OUTPUT).encode(text[:20_000], allowed_special="all") == tokenizer.encode(
        text[:20_000], allowed_special="all"
    ), "save/load round trip changed the encoding"
    specials = tokenizer.special_tokens
    n_merges = len(tokenizer.merges)
    sample_ids = tokenizer.encode(text[:200_000], allowed_special="all")
    print(f"corpus: {CORPUS.relative_to(ROOT)} ({len(text.encode('utf-8')):,} bytes, {len(documents)} documents)")
    print(f"trained in {seconds:.1f} s: 256 bytes + {n_merges} merges + {len(specials)} special tokens = vocab {tokenizer.vocab_size}")
    print(f"special token ids: {min(specials.values())}..{max(specials.values())} ({', '.join(list(specials)[:3])}, ...)")
    print(f"bytes per token on the first 200 kB: {len(text[:200_000].encode('utf-8')) / len(sample_ids):.2f}")
    last = [tokenizer.token_bytes(i) for i in range(256 + n_merges - 5, 256 + n_merges)]
    print(f"first merges: {[tokenizer.token_bytes(i) for i in range(256, 261)]}  last merges: {last}")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
