"""llmkit's tokenizer next to its peers, measured in one run on this machine.

    python benchmarks/tokenizer.py                      # every section: a few minutes on 2 CPU cores
    python benchmarks/tokenizer.py --only reference encode  # just the two issue-3 speed figures
    python benchmarks/tokenizer.py --only long          # one 1 MB chunk: quadratic BPE would take hours

Prints, side by side and as ratios (lower time ratio = llmkit faster):
  * training time for vocab 4096 on a 1 MB slice and on the whole course corpus: llmkit's fast
    trainer vs Hugging Face ``tokenizers`` and nanochat's ``rustbpe`` (both Rust, one thread);
  * the fast trainer vs llmkit's reference trainer at vocab 512 on 1 MB;
  * bytes per token on held-out text vs ``tokenizers`` trained with the same split and vocab;
  * encoding throughput of llmkit's pure-Python encoder vs tiktoken (one thread, warm chunk cache);
  * exactness: cl100k_base through llmkit vs tiktoken, and our ranks through tiktoken vs llmkit;
  * one 1 MB chunk (a repeated character; letters with no whitespace) through cl100k_base, and
    training on one 30,000-letter word vs rustbpe.
Timings are CPU seconds, the best of a few repeats; on a shared machine they still move by 10-30 %.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # peers single-threaded, like us (read at first use)

import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmkit.tokens import bpe  # noqa: E402
from llmkit.tokens.pattern import GPT4_PATTERN  # noqa: E402
from llmkit.tokens.cl100k import get_cl100k  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.tokens.tokenizer import Tokenizer  # noqa: E402

SLICE = 1_000_000


def best_time(run, repeats: int = 3):
    """(fewest CPU seconds of this process over ``repeats`` runs, result of the last run).

    CPU time, not wall time: every contender runs on one thread, so on a quiet machine the two
    are the same, and on a shared one the time spent waiting for a core is left out.
    """
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        result = run()
        best = min(best, time.process_time() - start)
    return best, result


def train_hf(documents: list[str], vocab_size: int):
    """Hugging Face byte-level BPE with the same GPT-4 split."""
    from tokenizers import Regex
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=0, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer


def train_rustbpe(documents: list[str], vocab_size: int):
    import rustbpe

    tokenizer = rustbpe.Tokenizer()
    tokenizer.train_from_iterator(iter(documents), vocab_size, pattern=GPT4_PATTERN)
    return tokenizer


def report(label: str, ours: float, peers: dict[str, float]) -> None:
    print(f"  {label}: llmkit {ours:.3f} s | " + " | ".join(f"{name} {t:.3f} s" for name, t in peers.items()))
    for name, t in peers.items():
        print(f"    RATIO {label}: llmkit / {name} = {ours / t:.2f}x")


SECTIONS = {
    "train": "1. training vs HF tokenizers and rustbpe (the slowest part: trains on the full corpus)",
    "reference": "2. fast vs reference trainer at vocab 512",
    "compression": "3. bytes per token vs HF tokenizers (needs the tokenizers trained in 'train')",
    "encode": "4. encoding throughput vs tiktoken",
    "cl100k": "5. cl100k_base exactness",
    "long": "6. one 1 MB chunk (a repeated character, text without whitespace) vs tiktoken, cl100k",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only", nargs="+", choices=sorted(SECTIONS), default=list(SECTIONS), metavar="SECTION",
        help="run only these sections: " + "; ".join(f"{name}: {what}" for name, what in SECTIONS.items()),
    )
    args = parser.parse_args(argv)
    if "compression" in args.only and "train" not in args.only:
        parser.error("'compression' compares the tokenizers that 'train' makes: add 'train' to --only")
    return args


def bench_training(documents: list[str], one_mb: list[str]) -> dict:
    print("\n1. Training, vocab 4096, GPT-4 split, one thread")
    trained = {}
    for label, docs in (("1 MB slice", one_mb), ("full corpus", documents)):
        ours, trained["llmkit", label] = best_time(lambda: Tokenizer.train(docs, 4096))
        hf, trained["hf", label] = best_time(lambda: train_hf(docs, 4096))
        rust, _ = best_time(lambda: train_rustbpe(docs, 4096))
        report(f"train 4096 on {label}", ours, {"HF tokenizers": hf, "rustbpe": rust})
    return trained


def bench_reference(one_mb: list[str]) -> None:
    print("\n2. Fast vs reference trainer, vocab 512 on 1 MB (the reference recounts every pair after each merge)")
    fast, _ = best_time(lambda: Tokenizer.train(one_mb, 512))
    chunk_counts = bpe.count_chunks(one_mb, GPT4_PATTERN)
    fast_loop, fast_merges = best_time(lambda: bpe.train_fast(chunk_counts, 256))
    split, chunks = best_time(lambda: bpe.split_chunks(one_mb, GPT4_PATTERN))
    reference_loop, reference_merges = best_time(lambda: bpe.train_reference(chunks, 256), repeats=1)  # a minute
    assert fast_merges == reference_merges
    reference = split + reference_loop
    print(f"  end to end (split + count + merges): fast {fast:.3f} s, reference {reference:.2f} s")
    print(f"    RATIO reference / fast, end to end = {reference / fast:.0f}x")
    print(f"  merge loop only: fast {fast_loop:.3f} s, reference {reference_loop:.2f} s")
    print(f"    RATIO reference / fast, merge loop = {reference_loop / fast_loop:.0f}x")


def bench_compression(trained: dict, heldout: str) -> None:
    print("\n3. Compression: bytes per token on held-out text (same split, same vocab)")
    heldout_bytes = len(heldout.encode("utf-8"))
    for label in ("1 MB slice", "full corpus"):
        ours = heldout_bytes / len(trained["llmkit", label].encode_ordinary(heldout))
        hf = heldout_bytes / len(trained["hf", label].encode(heldout).ids)
        print(f"  vocab 4096 trained on {label}: llmkit {ours:.4f}, HF tokenizers {hf:.4f}")
        print(f"    RATIO bytes/token llmkit / HF ({label}) = {ours / hf:.4f} (difference {100 * (ours / hf - 1):+.2f}%)")


def bench_encoding(corpus: str, hf_tokenizer=None) -> None:
    print("\n4. Encoding the course corpus (shipped tokenizer, vocab 2048, one thread)")
    shipped = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    engine = shipped.to_tiktoken()
    megabytes = len(corpus.encode("utf-8")) / 1e6
    shipped.encode_ordinary(corpus)  # warm the chunk cache
    ours, our_ids = best_time(lambda: shipped.encode_ordinary(corpus), repeats=5)
    tik, tik_ids = best_time(lambda: engine.encode_ordinary(corpus), repeats=5)
    line = f"  llmkit (pure Python, warm cache) {megabytes / ours:.1f} MB/s | tiktoken {megabytes / tik:.1f} MB/s"
    if hf_tokenizer is not None:
        hf, _ = best_time(lambda: hf_tokenizer.encode(corpus), repeats=1)
        line += f" | HF tokenizers (vocab 4096) {megabytes / hf:.1f} MB/s"
    print(line)
    print(f"    RATIO encode throughput llmkit / tiktoken = {tik / ours:.2f}x")
    print(f"  our ranks through tiktoken's engine give llmkit's ids: {our_ids == tik_ids}")
    # The same text through encode(), which also finds the <|endoftext|> markers between documents.
    ours_special, our_ids = best_time(lambda: shipped.encode(corpus, allowed_special="all"))
    tik_special, tik_ids = best_time(lambda: engine.encode(corpus, allowed_special="all"))
    print(f"  encode(allowed_special='all'): llmkit {megabytes / ours_special:.1f} MB/s | "
          f"tiktoken {megabytes / tik_special:.1f} MB/s, same ids: {our_ids == tik_ids}")
    print(f"    RATIO encode with special tokens llmkit / tiktoken = {tik_special / ours_special:.2f}x")


def bench_cl100k(heldout: str) -> None:
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


def long_chunk_texts(corpus: str) -> dict[str, str]:
    """Inputs where the pre-split cannot help: each is (nearly) one chunk of about 1 MB."""
    letters = "".join(ch for ch in corpus[: 2 * SLICE] if ch.isalpha())[:SLICE]
    return {
        "1 MB of ' ' (one repeated character)": " " * SLICE,
        "1 MB of 'x' (one repeated character)": "x" * SLICE,
        "1 MB without whitespace (the corpus's letters only)": letters,
    }


def bench_long_chunks(corpus: str) -> None:
    print("\n6. One 1 MB chunk through cl100k_base: llmkit's heap BPE vs tiktoken (one run each)")
    cl100k = get_cl100k()
    ours_cl100k = Tokenizer.from_tiktoken(cl100k)
    for label, text in long_chunk_texts(corpus).items():
        ours, our_ids = best_time(lambda: ours_cl100k.encode_ordinary(text), repeats=1)
        tik, tik_ids = best_time(lambda: cl100k.encode_ordinary(text), repeats=1)
        print(f"  {label}: llmkit {ours:.2f} s | tiktoken {tik:.2f} s | same ids: {our_ids == tik_ids}")
        print(f"    RATIO {label}: llmkit / tiktoken = {ours / tik:.2f}x")
    rng = random.Random(0)
    word = "".join(rng.choice("abcdefghij") for _ in range(30_000))
    ours, _ = best_time(lambda: Tokenizer.train(word, 256 + 300), repeats=1)
    rust, _ = best_time(lambda: train_rustbpe([word], 256 + 300), repeats=1)
    report("train 300 merges on one 30,000-letter word", ours, {"rustbpe": rust})


def main(argv: list[str] | None = None) -> None:
    only = parse_args(argv).only
    corpus = data_path("corpus", "train.txt").read_text(encoding="utf-8")
    heldout = data_path("corpus", "heldout.txt").read_text(encoding="utf-8").replace("<|endoftext|>", "")
    documents = corpus.split("<|endoftext|>")
    one_mb = [corpus[:SLICE]]
    print(f"corpus {len(corpus.encode()):,} bytes in {len(documents)} documents; held-out {len(heldout.encode()):,} bytes")

    trained = bench_training(documents, one_mb) if "train" in only else {}
    if "reference" in only:
        bench_reference(one_mb)
    if "compression" in only:
        bench_compression(trained, heldout)
    if "encode" in only:
        bench_encoding(corpus, trained.get(("hf", "full corpus")))
    if "cl100k" in only:
        bench_cl100k(heldout)
    if "long" in only:
        bench_long_chunks(corpus)


if __name__ == "__main__":
    main()
