"""llmkit.tokens.words: a word's tokens inside a sentence, the same question under either pre-split."""
import pytest
from hypothesis import given, settings, strategies as st

from llmkit.tokens.tokenizer import Tokenizer
from llmkit.tokens.words import next_word_prompt, space_ids, spaces_apart, token_at, word_ids, word_token

TEXT = ("the king and the queen spoke to the lord of the land; the king said that the lord was kind. " * 40
        + '{"city": "Pune", "name": "get_weather"} ' * 20)


_TOKENIZERS = {pattern: Tokenizer.train([TEXT], 300, pattern=pattern) for pattern in ("gpt4", "spaced")}


@pytest.fixture(scope="module", params=["gpt4", "spaced"])
def trained(request):
    return request.param, _TOKENIZERS[request.param]


def test_spaces_apart_tells_the_patterns_apart(trained):
    pattern, tokenizer = trained
    assert spaces_apart(tokenizer) == (pattern == "spaced")


def test_a_word_is_one_token_with_or_without_its_space(trained):
    pattern, tokenizer = trained
    king = word_token(tokenizer, "king")
    assert word_token(tokenizer, " king") == king
    # the token is what the word is inside a sentence: the sentence's ids hold it
    assert king in tokenizer.encode_ordinary("so the king said")
    expected = " king" if pattern == "gpt4" else "king"
    assert tokenizer.decode([king]) == expected


def test_word_ids_leave_out_the_space_only_where_it_stands_apart(trained):
    pattern, tokenizer = trained
    for word in ["king", "queen", "Bishkek", "zzyzx"]:
        ids = word_ids(tokenizer, word)
        # GPT-4's pre-split keeps the space in the word's chunk (a rare word may start with it as
        # a byte of its own); the spaced one cuts it off, and word_ids drops it
        assert tokenizer.decode(ids) == (" " + word if pattern == "gpt4" else word)


def test_a_word_of_several_tokens_is_a_clear_error(trained):
    _, tokenizer = trained
    with pytest.raises(ValueError, match="'zzyzx' is .* tokens inside a sentence"):
        word_token(tokenizer, "zzyzx")
    with pytest.raises(ValueError, match="expected a word"):
        word_ids(tokenizer, "  ")


def test_next_word_prompt_ends_where_a_word_starts(trained):
    pattern, tokenizer = trained
    ids = next_word_prompt(tokenizer, "the lord of the")
    # followed by a word's token, the prompt is the same ids as the whole sentence
    assert tokenizer.encode_ordinary("the lord of the land") == ids + word_ids(tokenizer, "land")
    assert (ids[-len(space_ids(tokenizer)):] == space_ids(tokenizer)) == (pattern == "spaced")


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12))
def test_any_word_reads_back_as_itself(word):
    for pattern in ("gpt4", "spaced"):
        tokenizer = _TOKENIZERS[pattern]
        assert tokenizer.decode(word_ids(tokenizer, word)).strip() == word
        assert tokenizer.encode_ordinary("a " + word)[-len(word_ids(tokenizer, word)):] == word_ids(tokenizer, word)




def test_token_at_finds_the_token_that_holds_a_character(trained):
    _, tokenizer = trained
    text = "so the king said Bishkek"
    ids = tokenizer.encode_ordinary(text)
    for char in range(len(text)):
        position = token_at(tokenizer, ids, char)
        before = len(tokenizer.decode(ids[:position]))
        assert before <= char < before + len(tokenizer.decode([ids[position]]))
    with pytest.raises(ValueError, match="outside the text"):
        token_at(tokenizer, ids, len(text))
