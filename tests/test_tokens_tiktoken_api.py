"""tiktoken's public Encoding methods on llmkit's Tokenizer, checked against tiktoken itself.

The behaviours tiktoken's own test suite checks for cl100k_base (round trips, special-token
rules, batch and offset methods, very long repeated input, random text), written as our own tests
with tiktoken as the expected answer rather than stored ids.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.tokens.cl100k import get_cl100k
from llmkit.tokens.tokenizer import Tokenizer, UnknownTokenError

TIKTOKEN = get_cl100k()
OURS = Tokenizer.from_tiktoken(TIKTOKEN)
# Unassigned code points are left out: the two regex engines ship different Unicode versions.
TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs", "Cn"]), max_size=60)
EXAMPLES = ["hello world", "", "0", "00", "000", "0000", "00000", "rer", "'rer", "today\n ", "today\n \n",
            "today\n  \n", "👍", "我非常渴望与人工智能一起工作", "  indented\n\tcode()  ", "It's 4:30pm, we'll see"]


@pytest.mark.parametrize("text", EXAMPLES)
def test_small_examples_give_tiktoken_ids_and_round_trip(text):
    ids = OURS.encode(text)
    assert ids == TIKTOKEN.encode(text)
    assert OURS.decode(ids) == text


@pytest.mark.parametrize("character", ["^", "0", "a", "'s", " ", "\n", "é", "日"])
def test_catastrophically_repetitive_text(character):
    for text in (character * 10_000, " " + character * 10_000, character * 10_000 + "\n"):
        ids = OURS.encode(text)
        assert ids == TIKTOKEN.encode(text)
        assert OURS.decode(ids) == text


@pytest.mark.parametrize("text", [" " * 100_000, "x" * 100_000, "ab" * 50_000, "1" * 100_000])
def test_very_long_repeated_input(text):
    assert OURS.encode_ordinary(text) == TIKTOKEN.encode_ordinary(text)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_random_text_round_trips_with_tiktoken_ids(text):
    ids = OURS.encode(text, disallowed_special=())
    assert ids == TIKTOKEN.encode(text, disallowed_special=())
    assert OURS.decode(ids) == text
    assert OURS.encode_ordinary(text) == ids  # disallowed_special=() is plain text


def test_every_token_round_trips_as_a_single_token():
    for token in range(OURS.max_token_value + 1):
        try:
            expected = TIKTOKEN.decode_single_token_bytes(token)
        except KeyError:  # an unused id: both refuse it
            with pytest.raises(KeyError):
                OURS.token_bytes(token)
            continue
        assert OURS.token_bytes(token) == expected
        assert OURS.encode_single_token(expected) == token == TIKTOKEN.encode_single_token(expected)


def test_single_tokens_special_and_not():
    for text in ("<|endoftext|>", "<|endofprompt|>", " the", b"\xe6"):
        assert OURS.encode_single_token(text) == TIKTOKEN.encode_single_token(text)
    for text in ("hello world", "<|nope|>", b""):
        with pytest.raises(KeyError):
            TIKTOKEN.encode_single_token(text)
        with pytest.raises(KeyError):
            OURS.encode_single_token(text)


def test_special_token_rules():
    text = "hello <|endoftext|>"
    assert OURS.encode(text, allowed_special="all") == TIKTOKEN.encode(text, allowed_special="all")
    assert OURS.encode(text, allowed_special={"<|endoftext|>"}) == TIKTOKEN.encode(text, allowed_special={"<|endoftext|>"})
    assert OURS.encode(text, disallowed_special=()) == TIKTOKEN.encode(text, disallowed_special=())
    for tokenizer in (OURS, TIKTOKEN):
        with pytest.raises(ValueError):
            tokenizer.encode(text)
        with pytest.raises(ValueError):
            tokenizer.encode(text, disallowed_special={"<|endoftext|>"})
        with pytest.raises(ValueError):
            tokenizer.encode("<|endofprompt|>", allowed_special={"<|endoftext|>"})


def test_properties():
    assert OURS.eot_token == TIKTOKEN.eot_token == 100257
    assert OURS.max_token_value == TIKTOKEN.max_token_value
    assert OURS.special_tokens_set == TIKTOKEN.special_tokens_set
    assert OURS.vocab_size == TIKTOKEN.n_vocab
    without_eot = Tokenizer.from_merges([], special_tokens=["<|user|>"])
    with pytest.raises(KeyError, match="no <\\|endoftext\\|> token"):
        without_eot.eot_token


def test_batch_methods():
    texts = ["hello world", "goodbye world", "", "a<|endoftext|>b"]
    assert OURS.encode_batch(texts, allowed_special="all") == TIKTOKEN.encode_batch(texts, allowed_special="all")
    assert OURS.encode_ordinary_batch(texts) == TIKTOKEN.encode_ordinary_batch(texts)
    batch = TIKTOKEN.encode_batch(texts, allowed_special="all")
    assert OURS.decode_batch(batch) == TIKTOKEN.decode_batch(batch) == texts
    assert OURS.encode_batch(texts[:2], num_threads=1) == TIKTOKEN.encode_batch(texts[:2], num_threads=1)
    with pytest.raises(TypeError, match="list of texts"):
        OURS.encode_batch("hello world")
    with pytest.raises(ValueError, match="num_threads"):
        OURS.decode_batch(batch, num_threads=0)


def test_decode_bytes_per_token_and_errors_argument():
    ids = TIKTOKEN.encode("🦫 ok")
    assert OURS.decode_tokens_bytes(ids) == TIKTOKEN.decode_tokens_bytes(ids)
    partial = ids[:1]
    for errors in ("replace", "ignore", "backslashreplace"):
        assert OURS.decode(partial, errors=errors) == TIKTOKEN.decode(partial, errors=errors)
    for tokenizer in (OURS, TIKTOKEN):
        with pytest.raises(UnicodeDecodeError):
            tokenizer.decode(partial, errors="strict")


@pytest.mark.parametrize("text", ["hello world", "hello world<|endoftext|> green cow", "我非常渴望与人工智能一起工作",
                                  "naïve 🦫 café", ""])
def test_decode_with_offsets(text):
    ids = TIKTOKEN.encode(text, allowed_special="all")
    assert OURS.decode_with_offsets(ids) == TIKTOKEN.decode_with_offsets(ids)
    assert OURS.decode_with_offsets(ids)[0] == text


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_decode_with_offsets_on_random_text(text):
    ids = OURS.encode_ordinary(text)
    decoded, offsets = OURS.decode_with_offsets(ids)
    assert (decoded, offsets) == TIKTOKEN.decode_with_offsets(ids)
    assert offsets == sorted(offsets) and all(0 <= o <= max(len(text) - 1, 0) for o in offsets)


def test_unknown_ids_are_key_errors_and_value_errors():
    used = set(OURS.mergeable_ranks.values()) | set(OURS.special_tokens.values())
    unused = min(set(range(OURS.max_token_value)) - used)  # cl100k leaves gaps below its specials
    with pytest.raises(KeyError):
        TIKTOKEN.decode_single_token_bytes(unused)
    for bad, call in ((unused, OURS.token_bytes), (unused, lambda i: OURS.decode([1, i])), (-1, OURS.token_bytes)):
        with pytest.raises(UnknownTokenError, match=f"token id {bad} is not in the vocabulary") as info:
            call(bad)
        assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)


def test_lone_surrogates_are_refused_where_tiktoken_replaces_them():
    """A deliberate difference: tiktoken turns a lone surrogate into U+FFFD, changing the text."""
    text = "a\ud83db"
    assert TIKTOKEN.decode(TIKTOKEN.encode(text)) == "a\ufffdb"
    with pytest.raises(ValueError, match="lone surrogate"):
        OURS.encode(text)
