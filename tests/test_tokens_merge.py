"""BPE inside one chunk: the readable scan and the heap version give the same ids on any input."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.paths import data_path
from llmkit.tokens.cl100k import get_cl100k
from llmkit.tokens.merge import LONG_CHUNK, merge_chunk, merge_chunk_heap, merge_chunk_reference
from llmkit.tokens.tokenizer import Tokenizer

TIKTOKEN_CL100K = get_cl100k()
CL100K_RANKS = TIKTOKEN_CL100K._mergeable_ranks
SHIPPED_RANKS = Tokenizer.load(data_path("models", "base", "tokenizer.json")).mergeable_ranks
RANK_TABLES = {"cl100k": CL100K_RANKS, "course": SHIPPED_RANKS}

# Chunks made of a few repeated units: where merges chain, overlap and tie.
repetitive = st.builds(
    lambda unit, repeats, head, tail: (head + unit * repeats + tail).encode("utf-8"),
    unit=st.text(alphabet="ab e\n1é日🙂", min_size=1, max_size=4),
    repeats=st.integers(1, 120),
    head=st.text(alphabet="xa ", max_size=3),
    tail=st.text(alphabet="b. ", max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(piece=st.binary(min_size=1, max_size=200) | repetitive, table=st.sampled_from(sorted(RANK_TABLES)))
def test_heap_and_reference_merges_agree(piece, table):
    ranks = RANK_TABLES[table]
    assert merge_chunk_heap(piece, ranks) == merge_chunk_reference(piece, ranks)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=300))
def test_heap_merges_agree_on_any_utf8_text(text):
    piece = text.encode("utf-8")
    assert merge_chunk_heap(piece, CL100K_RANKS) == merge_chunk_reference(piece, CL100K_RANKS)


@pytest.mark.parametrize("piece", [b" " * 3000, b"ab" * 1500, b"x" * 2999, "日本".encode() * 700, b"\n\n\t " * 600])
def test_long_repetitive_chunks_agree_with_the_reference_and_tiktoken(piece):
    expected = merge_chunk_reference(piece, CL100K_RANKS)
    assert merge_chunk_heap(piece, CL100K_RANKS) == expected == merge_chunk(piece, CL100K_RANKS)
    assert expected == TIKTOKEN_CL100K._encode_single_piece(piece)  # tiktoken's BPE without its pre-split


def test_merge_chunk_uses_the_scan_for_short_chunks_and_the_heap_for_long_ones(monkeypatch):
    from llmkit.tokens import merge

    calls = []
    monkeypatch.setattr(merge, "merge_chunk_heap", lambda piece, ranks: calls.append(len(piece)) or [])
    merge.merge_chunk(b"a" * LONG_CHUNK, CL100K_RANKS)
    merge.merge_chunk(b"a" * (LONG_CHUNK + 1), CL100K_RANKS)
    assert calls == [LONG_CHUNK + 1]


def test_a_whole_chunk_that_is_one_token_is_one_id():
    piece = " the".encode()
    assert merge_chunk_heap(piece, CL100K_RANKS) == merge_chunk_reference(piece, CL100K_RANKS) == [CL100K_RANKS[piece]]
