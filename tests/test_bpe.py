"""BPE training: the merge rule, the tie-break, and reference == fast == rustbpe."""
from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.tokens import bpe
from llmkit.tokens.pattern import GPT2_PATTERN, GPT4_PATTERN, SPACED_PATTERN, resolve_pattern
from llmkit.paths import data_path


def train_both(documents, n_merges, pattern):
    pattern = resolve_pattern(pattern)
    reference = bpe.train_reference(bpe.split_chunks(documents, pattern), n_merges)
    return reference, bpe.train_fast(bpe.count_chunks(documents, pattern), n_merges)


def token_bytes_in_merge_order(merges):
    vocab = [bytes([b]) for b in range(256)]
    for left, right in merges:
        vocab.append(vocab[left] + vocab[right])
    return vocab


def rustbpe_tokens(peer) -> list[bytes]:
    """rustbpe's vocabulary as token bytes in id order (= merge order)."""
    return [bytes(token) for token, _ in sorted(peer.get_mergeable_ranks(), key=lambda item: item[1])]


@pytest.fixture(scope="module")
def corpus_documents():
    return data_path("corpus", "train.txt").read_text(encoding="utf-8").split("<|endoftext|>")


def test_merge_pair_is_left_to_right_and_non_overlapping():
    assert bpe.merge_pair([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert bpe.merge_pair([1, 1, 1], (1, 1), 9) == [9, 1]
    assert bpe.merge_pair([5, 1, 2, 1, 2, 1], (1, 2), 9) == [5, 9, 9, 1]
    assert bpe.merge_pair([2, 1], (1, 2), 9) == [2, 1]


def test_ties_go_to_the_smallest_pair_of_ids():
    assert bpe.best_pair({(5, 1): 3, (2, 9): 3, (2, 8): 3, (0, 0): 2}) == (2, 8)
    # "aaabdaaabac": (a,a) wins with 4; then (256,a) and (a,b) tie at 2 and (97, 98) is smaller.
    assert bpe.train_reference(["aaabdaaabac"], 3) == [(97, 97), (97, 98), (256, 257)]
    assert bpe.train_fast(Counter({"aaabdaaabac": 1}), 3) == [(97, 97), (97, 98), (256, 257)]


def test_trainers_stop_when_no_pair_is_left():
    assert bpe.train_reference(["ab", "c", "ab", "ab"], 10) == [(97, 98)]
    assert bpe.train_fast(Counter({"ab": 3, "c": 1}), 10) == [(97, 98)]


def test_every_occurrence_of_a_chunk_counts():
    # "cd" twice beats "ab" once; with one vote per distinct chunk, the tie would go to (a, b).
    assert bpe.train_reference(["ab", "cd", "cd"], 1) == [(99, 100)]
    assert bpe.train_fast(bpe.count_chunks(["ab", "cd", "cd"], GPT4_PATTERN), 1) == [(99, 100)]


def test_count_chunks_counts_what_split_chunks_cuts():
    documents = ["the cat sat, the cat ran.\n\n", "", "dog's 12345 days"]
    for pattern in (GPT4_PATTERN, GPT2_PATTERN, SPACED_PATTERN, None):
        chunks = bpe.split_chunks(documents, pattern)
        assert "".join(chunks) == "".join(documents)  # nothing lost, in order
        assert bpe.count_chunks(documents, pattern) == Counter(chunks)


def test_reference_trainer_refuses_chunk_counts():
    with pytest.raises(TypeError, match="split_chunks"):
        bpe.train_reference(Counter({"ab": 3}), 1)
    with pytest.raises(TypeError, match="split_chunks"):
        bpe.train_reference("ab ab", 1)


@settings(max_examples=300, deadline=None)
@given(
    documents=st.lists(st.text(alphabet="ab c\n'1é日", max_size=40), min_size=1, max_size=6),
    n_merges=st.integers(0, 40),
    pattern=st.sampled_from(["gpt4", "gpt2", None]),
)
def test_reference_and_fast_trainers_agree_on_random_corpora(documents, n_merges, pattern):
    reference, fast = train_both(documents, n_merges, pattern)
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(
    documents=st.lists(st.text(alphabet="ab c\n'1é日", max_size=40), min_size=1, max_size=6),
    n_merges=st.integers(0, 40),
)
def test_fast_trainer_matches_rustbpe_on_random_corpora(documents, n_merges):
    rustbpe = pytest.importorskip("rustbpe")
    ours = bpe.train_fast(bpe.count_chunks(documents, GPT4_PATTERN), n_merges)
    peer = rustbpe.Tokenizer()
    peer.train_from_iterator(iter(documents), 256 + n_merges, pattern=GPT4_PATTERN)
    assert rustbpe_tokens(peer) == token_bytes_in_merge_order(ours)


def test_merges_do_not_depend_on_document_order(corpus_documents):
    text = corpus_documents[0][:50_000]
    lines = text.splitlines(keepends=True)
    shuffled = lines[:]
    random.Random(0).shuffle(shuffled)
    merges = bpe.train_fast(bpe.count_chunks(lines, GPT4_PATTERN), 200)
    assert bpe.train_fast(bpe.count_chunks(shuffled, GPT4_PATTERN), 200) == merges


def test_fast_trainer_matches_rustbpe_on_a_slice(corpus_documents):
    rustbpe = pytest.importorskip("rustbpe")
    text = corpus_documents[1][:300_000]
    ours = bpe.train_fast(bpe.count_chunks([text], GPT4_PATTERN), 1024 - 256)
    peer = rustbpe.Tokenizer()
    peer.train_from_iterator(iter([text]), 1024, pattern=GPT4_PATTERN)
    assert rustbpe_tokens(peer) == token_bytes_in_merge_order(ours)


@pytest.mark.slow
def test_fast_trainer_matches_rustbpe_on_the_course_corpus_at_vocab_4096(corpus_documents):
    rustbpe = pytest.importorskip("rustbpe")
    ours = bpe.train_fast(bpe.count_chunks(corpus_documents, GPT4_PATTERN), 4096 - 256)
    peer = rustbpe.Tokenizer()
    peer.train_from_iterator(iter(corpus_documents), 4096, pattern=GPT4_PATTERN)
    peer_tokens = rustbpe_tokens(peer)
    ours_tokens = token_bytes_in_merge_order(ours)
    assert len(ours_tokens) == len(peer_tokens) == 4096
    first_difference = next((i for i, (a, b) in enumerate(zip(ours_tokens, peer_tokens)) if a != b), None)
    assert first_difference is None, f"merge {first_difference}: {ours_tokens[first_difference]!r} vs rustbpe {peer_tokens[first_difference]!r}"


@pytest.mark.slow
def test_reference_and_fast_trainers_agree_on_the_course_heldout_text_at_vocab_1024():
    # The held-out part of the course corpus (244 KB; about a minute of CPU): the reference trainer
    # recounts every pair in every chunk after each merge, which would take some twenty minutes on
    # the 4.8 MB training part. Fast == rustbpe covers that.
    documents = data_path("corpus", "heldout.txt").read_text(encoding="utf-8").split("<|endoftext|>")
    fast = bpe.train_fast(bpe.count_chunks(documents, GPT4_PATTERN), 1024 - 256)
    assert fast == bpe.train_reference(bpe.split_chunks(documents, GPT4_PATTERN), 1024 - 256)


def test_resolve_pattern():
    assert resolve_pattern("gpt4") == GPT4_PATTERN
    assert resolve_pattern("gpt2") == GPT2_PATTERN
    assert resolve_pattern(None) is None
    assert resolve_pattern(r"\w+|\W") == r"\w+|\W"
    with pytest.raises(ValueError, match="not a valid regex"):
        resolve_pattern("(unclosed")
    with pytest.raises(TypeError, match="pattern must be"):
        resolve_pattern(4)


def test_gpt4_pattern_is_tiktoken_cl100k_pattern():
    from llmkit.tokens.cl100k import get_cl100k

    assert GPT4_PATTERN == get_cl100k()._pat_str


# ------------------------------------------------------------------ long chunks
@settings(max_examples=150, deadline=None)
@given(
    unit=st.text(alphabet="ab é", min_size=1, max_size=3),
    repeats=st.integers(1, 400),
    tail=st.text(alphabet="abc", max_size=5),
    n_merges=st.integers(0, 30),
)
def test_trainers_agree_on_long_repetitive_chunks(unit, repeats, tail, n_merges):
    documents = [unit * repeats + tail, tail + unit * (repeats // 2)]
    reference, fast = train_both(documents, n_merges, None)  # no pre-split: each document is one chunk
    assert fast == reference


def test_fast_trainer_on_one_long_chunk_matches_the_reference():
    """A 30,000-letter word, the case that once rewrote the whole chunk per occurrence (speed: the
    benchmark); here the merges must equal the reference trainer's."""
    rng = random.Random(1)
    word = "".join(rng.choice("abcdefgh") for _ in range(30_000))
    fast = bpe.train_fast(Counter({word: 1}), 300)
    assert len(fast) == 300
    assert fast[:40] == bpe.train_reference([word], 40)
    assert bpe.train_fast(Counter({"a" * 30_000: 1}), 100) == bpe.train_reference(["a" * 30_000], 100)
