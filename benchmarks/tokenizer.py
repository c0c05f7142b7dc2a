"""llmkit's tokenizer next to its peers, measured in one run on this machine.

    python benchmarks/tokenizer.py            # about a minute on 2 CPU cores

Prints, side by side and as ratios (lower time ratio = llmkit faster):
  * training time for vocab 4096 on a 1 MB slice and on the whole course corpus: llmkit's fast
    trainer vs Hugging Face ``tokenizers`` and nanochat's ``rustbpe`` (both Rust, one thread);
  * the fast trainer vs llmkit's reference trainer at vocab 512 on 1 MB;
  * bytes per token on held-out text vs ``tokenizers`` trained with the same split and vocab;
  * encoding throughput of llmkit's pure-Python encoder vs tiktoken (one thread, warm chunk cache);
  * exactness: cl100k_base through llmkit vs tiktoken, and our ranks through tiktoken vs llmkit.
Timings are the best of a few repeats; on a shared machine they still move by 10-30 %.
"""
from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # peers single-threaded, like us (read at first use)

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmkit import bpe  # noqa: E402
from llmkit.cl100k import get_cl100k  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.tokenizer import Tokenizer  # noqa: E402

SLICE = 1_000_000


def best_time(run, repeats: int = 3):
    """(fastest wall time in seconds, result of the last run)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def train_hf(documents: list[str], vocab_size: int):
    """Hugging Face byte-level BPE with the same GPT-4 split."""
    from tokenizers import Regex
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(bpe.GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=0, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer


def train_rustbpe(documents: list[str], vocab_size: int):
    import rustbpe

    tokenizer = rustbpe.Tokenizer()
    tokenizer.train_from_iterator(iter(documents), vocab_size, pattern=bpe.GPT4_PATTERN)
    return tokenizer


def report(label: str, ours: float, peers: dict[str, float]) -> None:
    print(f"  {label}: llmkit {ours:.3f} s | " + " | ".join(f"{name} {t:.3f} s" for name, t in peers.items()))
    for name, t in peers.items():
        print(f"    RATIO {label}: llmkit / {name} = {ours / t:.2f}x")


def main() -> None:
    corpus = data_path("corpus", "train.txt").read_text(encoding="utf-8")
    heldout = data_path("corpus", "heldout.txt").read_text(encoding="utf-8").replace("<|endoftext|>", "")
    documents = corpus.split("<|endoftext|>")
    one_mb = [corpus[:SLICE]]
    print(f"corpus {len(corpus.encode()):,} bytes in {len(documents)} documents; held-out {len(heldout.encode()):,} bytes")

    print("\n1. Training, vocab 4096, GPT-4 split, one thread")
    trained = {}
    for label, docs in (("1 MB slice", one_mb), ("full corpus", documents)):
        ours, trained["llmkit", label] = best_time(lambda: Tokenizer.train(docs, 4096))
        hf, trained["hf", label] = best_time(lambda: train_hf(docs, 4096))
        rust, _ = best_time(lambda: train_rustbpe(docs, 4096))
        report(f"train 4096 on {label}", ours, {"HF tokenizers": hf, "rustbpe": rust})

    print("\n2. Fast vs reference trainer, vocab 512 on 1 MB")
    fast, _ = best_time(lambda: Tokenizer.train(one_mb, 512))
    reference, _ = best_time(lambda: Tokenizer.train(one_mb, 512, trainer="reference"), repeats=1)
    chunk_counts = bpe.count_chunks(one_mb, bpe.GPT4_PATTERN)
    fast_loop, fast_merges = best_time(lambda: bpe.train_fast(chunk_counts, 256))
    reference_loop, reference_merges = best_time(lambda: bpe.train_reference(chunk_counts, 256), repeats=1)
    assert fast_merges == reference_merges
    print(f"  end to end (split + count + merges): fast {fast:.3f} s, reference {reference:.2f} s")
    print(f"    RATIO reference / fast, end to end = {reference / fast:.0f}x")
    print(f"  merge loop only (same counted chunks): fast {fast_loop:.3f} s, reference {reference_loop:.2f} s")
    print(f"    RATIO reference / fast, merge loop = {reference_loop / fast_loop:.0f}x")

    print("\n3. Compression: bytes per token on held-out text (same split, same vocab)")
    heldout_bytes = len(heldout.encode("utf-8"))
    for label in ("1 MB slice", "full corpus"):
        ours = heldout_bytes / len(trained["llmkit", label].encode_ordinary(heldout))
        hf = heldout_bytes / len(trained["hf", label].encode(heldout).ids)
        print(f"  vocab 4096 trained on {label}: llmkit {ours:.4f}, HF tokenizers {hf:.4f}")
        print(f"    RATIO bytes/token llmkit / HF ({label}) = {ours / hf:.4f} (difference {100 * (ours / hf - 1):+.2f}%)")

    print("\n4. Encoding the course corpus (shipped tokenizer, vocab 2048, one thread)")
    shipped = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    engine = shipped.to_tiktoken()
    megabytes = len(corpus.encode("utf-8")) / 1e6
    shipped.encode_ordinary(corpus)  # warm the chunk cache
    ours, our_ids = best_time(lambda: shipped.encode_ordinary(corpus))
    tik, tik_ids = best_time(lambda: engine.encode_ordinary(corpus))
    hf_tokenizer = trained["hf", "full corpus"]
    hf, _ = best_time(lambda: hf_tokenizer.encode(corpus), repeats=1)
    print(f"  llmkit (pure Python, warm cache) {megabytes / ours:.1f} MB/s | tiktoken {megabytes / tik:.1f} MB/s | "
          f"HF tokenizers (vocab 4096) {megabytes / hf:.1f} MB/s")
    print(f"    RATIO encode throughput llmkit / tiktoken = {tik / ours:.2f}x")
    print(f"  our ranks through tiktoken's engine give llmkit's ids: {our_ids == tik_ids}")

    print("\n5. cl100k_base: llmkit's Python encoder vs tiktoken")
    cl100k, ours_cl100k = get_cl100k(), Tokenizer.from_tiktoken("cl100k_base")
    texts = [
        "The quick brown fox jumps over the lazy dog.", "नमस्ते, आप कैसे हैं?", "kal meeting thi yaar, boss ne bola",
        "今天天气很好", "def f(x):\n    return x ** 2\n", "👍🏽 🇮🇳 👨‍👩‍👧", "  odd \t\n\n whitespace  ",
        "31415926535897932384626433", heldout[:100_000],
    ]
    same = sum(ours_cl100k.encode(t, disallowed_special=()) == cl100k.encode(t, disallowed_special=()) for t in texts)
    special = "a<|endoftext|>b"
    same += ours_cl100k.encode(special, allowed_special="all") == cl100k.encode(special, allowed_special="all")
    print(f"  identical ids on {same} of {len(texts) + 1} texts (English, Hindi, Hinglish, Chinese, code, emoji, "
          f"whitespace, digits, Shakespeare, an allowed special token)")


if __name__ == "__main__":
    main()
