"""The constraint at scale: an enum of 50,000 values builds in linear time and is enforced exactly; a
tokenizer with a far-off special id is refused instead of looping over a billion ids."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmkit.chat.constrained import ToolCallConstraint
from llmkit.generation.json_automaton import Choice, value_matcher
from llmkit.tokens.tokenizer import Tokenizer


@given(st.sets(st.binary(max_size=6), min_size=1, max_size=20), st.binary(max_size=7))
def test_a_choice_accepts_exactly_its_options_and_their_prefixes(options, data):
    choice = Choice(options)
    assert choice.accepts(data) == (data in options)
    assert (choice.read(data) is not None) == any(option.startswith(data) for option in options)
    assert len(choice.children) <= 1 + sum(len(option) for option in options)  # a trie: linear in the input


def enum_tool(values: list) -> dict:
    return {"name": "pick", "description": "Pick one value.",
            "input_schema": {"type": "object", "properties": {"v": {"type": "string", "enum": values}},
                             "required": ["v"]}}


def test_a_huge_enum_is_enforced_exactly(tokenizer):
    values = [f"city-{i:05d}" for i in range(50_000)]
    constraint = ToolCallConstraint(tokenizer, [enum_tool(values)])
    constraint.advance(tokenizer.special_tokens["<|tool_call|>"])
    for token in tokenizer.encode('{"name": "pick", "input": {"v": "city-4'):
        assert constraint.allowed()[token]
        constraint.advance(token)
    allowed = constraint.allowed()
    for digit in "0123456789":  # "city-4" continues with any digit, since city-40000 .. 49999 exist
        assert allowed[tokenizer.encode(digit)[0]], digit
    assert not allowed[tokenizer.encode('"')[0]] and not allowed[tokenizer.encode("x")[0]]


def test_an_enum_keeps_only_values_of_its_type():
    matcher = value_matcher({"type": "integer", "enum": list(range(10_000)) + ["7", 2.5, True]}, "v")
    assert matcher.accepts(b"9999") and not matcher.accepts(b'"7"') and not matcher.accepts(b"2.5")
    assert not matcher.accepts(b"true")


def test_an_enum_without_a_type_takes_its_values_as_they_are():
    matcher = value_matcher({"enum": ["a", 1, None, [1, 2], {"k": True}]}, "v")
    for text in (b'"a"', b"1", b"null", b"[1, 2]", b'{"k": true}'):
        assert matcher.accepts(text), text
    assert not matcher.accepts(b"2") and not matcher.accepts(b'"b"')


class FarOffSpecial:
    """A tokenizer from elsewhere (llmkit's own refuses such ids when it loads) whose <|end_turn|>
    has id 10**9, so its ids run to a billion though it has two thousand tokens."""

    def __init__(self, tokenizer: Tokenizer):
        self.inner = tokenizer
        self.special_tokens = {**tokenizer.special_tokens, "<|end_turn|>": 10**9}
        self.vocab_size = 10**9 + 1
        self.mergeable_ranks = tokenizer.mergeable_ranks

    def token_bytes(self, token: int) -> bytes:
        return self.inner.token_bytes(token)


def test_a_special_token_id_far_past_the_vocabulary_is_refused(tokenizer):
    with pytest.raises(ValueError, match=r"special token '<\|end_turn\|>' has id 1000000000.*number the special"):
        ToolCallConstraint(FarOffSpecial(tokenizer), [enum_tool(["a", "b"])])
    with pytest.raises(ValueError, match="number the special"):
        ToolCallConstraint(FarOffSpecial(tokenizer), [])  # even with no tools, no billion-entry mask
