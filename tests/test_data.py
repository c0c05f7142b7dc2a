"""llmkit.training.data: corpus files -> token ids -> windows and batches."""
import numpy as np
import pytest
import torch

from llmkit.training.data import load_tokens, random_batch, read_corpus, sequential_batches
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer

TOKENIZER = data_path("models", "base", "tokenizer.json")


def test_targets_are_inputs_shifted_by_one():
    tokens = np.arange(1000, dtype=np.uint16)  # token i has id i, so a window is a run of consecutive ids
    batch = random_batch(tokens, 8, 32, seed=0, step=0)
    assert batch.inputs.shape == batch.targets.shape == (8, 32)
    assert batch.inputs.dtype == torch.long and batch.mask is None
    assert torch.equal(batch.targets, batch.inputs + 1)
    assert torch.equal(batch.inputs[:, 1:], batch.inputs[:, :-1] + 1)  # each row is one contiguous window
    assert int(batch.targets.max()) < len(tokens)


def test_batches_are_a_seeded_function_of_the_step():
    tokens = np.arange(10_000, dtype=np.uint16)
    same = [random_batch(tokens, 4, 16, seed=7, step=3) for _ in range(2)]
    assert torch.equal(same[0].inputs, same[1].inputs)
    assert not torch.equal(same[0].inputs, random_batch(tokens, 4, 16, seed=7, step=4).inputs)
    assert not torch.equal(same[0].inputs, random_batch(tokens, 4, 16, seed=8, step=3).inputs)


def test_processes_split_the_global_batch_between_them():
    tokens = np.arange(10_000, dtype=np.uint16)
    whole = random_batch(tokens, 6, 16, seed=1, step=5).inputs
    parts = [random_batch(tokens, 6, 16, seed=1, step=5, rank=r, world_size=3).inputs for r in range(3)]
    for rank, part in enumerate(parts):
        assert torch.equal(part, whole[rank::3])
    with pytest.raises(ValueError, match="divisible"):
        random_batch(tokens, 5, 16, seed=1, step=0, world_size=2)


def test_corpus_shorter_than_a_window_is_refused():
    with pytest.raises(ValueError, match="too few"):
        random_batch(np.arange(10, dtype=np.uint16), 2, 16, seed=0, step=0)


@pytest.mark.parametrize("n_tokens", [2, 33, 64, 65, 100])
def test_sequential_batches_score_every_token_once(n_tokens):
    tokens = np.arange(n_tokens, dtype=np.uint16)
    batches = list(sequential_batches(tokens, context_length=16, batch_size=3))
    targets = torch.cat([b.targets.flatten() for b in batches])
    inputs = torch.cat([b.inputs.flatten() for b in batches])
    assert torch.equal(targets, torch.arange(1, n_tokens))  # every token after the first, in order
    assert torch.equal(inputs, targets - 1)
    assert all(b.inputs.shape[1] <= 16 and b.inputs.shape[0] <= 3 for b in batches)


def test_missing_corpus_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "train.txt"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        read_corpus(missing)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_tokens(missing, TOKENIZER, cache_dir=None)


def test_load_tokens_encodes_the_separator_and_caches(tmp_path):
    tokenizer = Tokenizer.load(TOKENIZER)
    text = "KING.\nWhat say you?\n<|endoftext|>\nHAMLET.\nTo be, or not to be.\n"
    corpus = tmp_path / "tiny.txt"
    corpus.write_text(text, encoding="utf-8")
    cache = tmp_path / "cache"

    first = load_tokens(corpus, TOKENIZER, cache_dir=cache)
    assert first.tokens.dtype == np.uint16
    assert first.n_bytes == len(text.encode("utf-8"))
    assert first.tokens.tolist().count(tokenizer.special_tokens["<|endoftext|>"]) == 1
    assert tokenizer.decode(first.tokens.tolist()) == text
    assert len(list(cache.glob("*.npy"))) == 1

    again = load_tokens(corpus, TOKENIZER, cache_dir=cache)  # from the cache, same ids
    assert np.array_equal(again.tokens, first.tokens)

    corpus.write_text(text + "More.\n", encoding="utf-8")  # an edited corpus is tokenised afresh
    edited = load_tokens(corpus, TOKENIZER, cache_dir=cache)
    assert tokenizer.decode(edited.tokens.tolist()).endswith("More.\n")
    assert len(list(cache.glob("*.npy"))) == 2


def test_head_counts_the_bytes_of_its_tokens(tmp_path):
    tokenizer = Tokenizer.load(TOKENIZER)
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("O Romeo, Romeo! wherefore art thou Romeo?\n" * 3, encoding="utf-8")
    text = load_tokens(corpus, TOKENIZER, cache_dir=None)
    head = text.head(5, tokenizer)
    assert len(head) == 5
    assert head.n_bytes == len(tokenizer.decode(text.tokens[:5].tolist()).encode("utf-8"))


# ------------------------------------------------------------------------------ repeated spans
def test_repeated_spans_say_each_span_twice_and_count_only_the_copyable_tokens():
    from llmkit.training.data import repeated_spans

    batch = repeated_spans(6, 64, 50, seed=3, step=2, span_lengths=(5, 9), separator=99)
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (6, 64)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    for inputs, targets, mask in zip(batch.inputs, batch.targets, batch.mask):
        row = torch.cat([inputs[:1], targets]).tolist()
        assert all(0 <= i < 50 or i == 99 for i in row)
        for t in mask.nonzero().flatten().tolist():  # every counted target appeared earlier, after the same token
            earlier = [j for j in range(t) if row[j] == row[t] and row[j + 1] == row[t + 1]]
            assert earlier, f"target {t + 1} was not said before"
    counted = batch.mask.float().mean().item()
    assert 0.3 < counted < 0.5  # the second sayings, less their first token


def test_word_spans_put_the_separator_after_words_of_one_to_three_ids():
    from llmkit.training.data import repeated_spans

    batch = repeated_spans(4, 96, 50, seed=3, step=2, span_lengths=(12, 12), word_separator=77)
    plain = repeated_spans(4, 96, 50, seed=3, step=2, span_lengths=(12, 12))
    assert torch.equal(batch.mask, plain.mask)  # the same positions count: only the ids differ
    for inputs, targets in zip(batch.inputs, batch.targets):
        row = torch.cat([inputs[:1], targets]).tolist()
        span = row[:12]
        words = " ".join(map(str, span)).split(" 77")[:-1]  # the last word may be cut by the span's end
        assert row[12:24] == span and 77 in span and all(1 <= len(w.split()) <= 3 for w in words)
    after_space = [t for t in range(95) if batch.inputs[0, t] == 77 and batch.mask[0, t]]
    assert after_space  # counted targets after a space: copying them needs the id before the space
    half = repeated_spans(40, 96, 50, seed=3, step=2, span_lengths=(12, 12), word_separator=77, word_share=0.5)
    share = (half.inputs == 77).float().mean().item() / (batch.inputs == 77).float().mean().item()
    assert 0.3 < share < 0.7


def test_repeated_spans_are_a_function_of_seed_and_step():
    from llmkit.training.data import repeated_spans

    first, again = (repeated_spans(3, 32, 100, seed=1, step=5) for _ in range(2))
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.mask, again.mask)
    assert not torch.equal(first.inputs, repeated_spans(3, 32, 100, seed=1, step=6).inputs)
    with pytest.raises(ValueError, match="span"):
        repeated_spans(3, 32, 100, seed=1, step=5, span_lengths=(0, 4))
