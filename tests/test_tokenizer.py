"""The Tokenizer: training, encode/decode, special tokens, files, clear errors."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.tokens import tokenizer as tokenizer_module
from llmkit.tokens import file as tokenizer_file
from llmkit.paths import DATA_DIR, data_path
from llmkit.tokens.tokenizer import COURSE_SPECIAL_TOKENS, Tokenizer

SAMPLE = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
)


@pytest.fixture(scope="module")
def shipped():
    return Tokenizer.load(data_path("models", "base", "tokenizer.json"))


@pytest.fixture(scope="module")
def small():
    text = data_path("corpus", "heldout.txt").read_text(encoding="utf-8")
    return Tokenizer.train(text.split("<|endoftext|>"), 400, special_tokens=["<|endoftext|>", "<|user|>"])


# ------------------------------------------------------------------ the shipped tokenizer
def test_course_special_tokens_are_the_documented_sixteen():
    guide = (DATA_DIR.parent / "DEVELOPERS.md").read_text(encoding="utf-8")
    section = guide.split("## Shipped special tokens", 1)[1].split("(16 in all", 1)[0]
    named = re.findall(r"`(<\|[a-z_0-9]+\|>)`", section)
    reserved = [f"<|reserved_{i}|>" for i in range(4)]
    assert COURSE_SPECIAL_TOKENS == named[:-2] + reserved  # the guide writes the reserved ones as a range
    assert len(COURSE_SPECIAL_TOKENS) == 16 == len(set(COURSE_SPECIAL_TOKENS))


def test_shipped_tokenizer_layout(shipped):
    assert shipped.vocab_size == 4096
    assert len(shipped.merges) == 4096 - 256 - 16
    assert list(shipped.special_tokens) == COURSE_SPECIAL_TOKENS
    assert sorted(shipped.special_tokens.values()) == list(range(4080, 4096))
    assert shipped.pattern == Tokenizer.train("ab", 257, pattern="spaced").pattern
    assert shipped.encode("<|endoftext|>", allowed_special="all") == [4080]


def test_shipped_tokenizer_is_what_the_recipe_makes(shipped, tmp_path):
    """The recipe's tokenizer stage, run from the config in git, writes the shipped file byte for byte."""
    import json
    import logging

    from llmkit.course.recipe_stages import run_tokenizer

    settings = json.loads(data_path("models", "recipe", "tokenizer.json").read_text(encoding="utf-8"))
    run_tokenizer({**settings, "progress": False}, tmp_path, logging.getLogger("test"))
    shipped_text = data_path("models", "base", "tokenizer.json").read_text(encoding="utf-8")
    assert (tmp_path / "tokenizer.json").read_text(encoding="utf-8") == shipped_text


def test_shipped_tokenizer_compresses_shakespeare(shipped):
    """The spaced pre-split keeps spaces out of words, so Shakespeare takes more tokens than with
    GPT-4's (about 2.25 bytes a token against 3.3); every byte still round-trips."""
    heldout = data_path("corpus", "heldout.txt").read_text(encoding="utf-8")
    ids = shipped.encode(heldout, allowed_special="all")
    assert 2.0 < len(heldout.encode("utf-8")) / len(ids) < 2.6
    assert shipped.decode(ids) == heldout


# ------------------------------------------------------------------ encoding and decoding
def test_leading_space_changes_the_tokens(shipped):
    assert shipped.encode("strawberry") != shipped.encode(" strawberry")
    for word in ("strawberry", " strawberry", "capybara"):
        ids = shipped.encode(word)
        assert b"".join(shipped.token_bytes(i) for i in ids) == word.encode("utf-8")
    assert len(shipped.encode(" capybara")) > 1  # a rare word is built from pieces


def test_nothing_is_unknown_bytes_fall_back(shipped):
    text = "日本語 🦫 Ωμέγα \x00\x7f"
    ids = shipped.encode(text)
    assert shipped.decode(ids) == text
    assert all(0 <= i < shipped.vocab_size - len(shipped.special_tokens) for i in ids)  # no special id


def test_decode_replaces_invalid_utf8_and_decode_bytes_is_exact(shipped):
    ids = shipped.encode("é")
    assert len(ids) == 2  # two bytes, no merge for them in Shakespeare
    assert shipped.decode(ids[:1]) == "\ufffd"
    assert shipped.decode_bytes(ids[:1]) == "é".encode("utf-8")[:1]


def test_encode_batch_and_encode_ordinary(small):
    texts = ["hello there", "", "<|user|> hi"]
    assert small.encode_batch(texts, disallowed_special=()) == [small.encode(t, disallowed_special=()) for t in texts]
    assert small.encode_ordinary("<|user|>") == small.encode("<|user|>", disallowed_special=())
    assert small.encode("") == [] and small.decode([]) == ""


def test_the_chunk_cache_stays_bounded_and_never_changes_the_ids(shipped, monkeypatch):
    text = data_path("corpus", "heldout.txt").read_text(encoding="utf-8")[:20_000]
    expected = shipped.to_tiktoken().encode_ordinary(text)
    monkeypatch.setattr(tokenizer_module, "CHUNK_CACHE_LIMIT", 50)
    fresh = Tokenizer(shipped.mergeable_ranks, special_tokens=shipped.special_tokens, pattern=shipped.pattern)
    assert fresh.encode_ordinary(text) == expected  # the cache starts over many times on the way
    assert 0 < len(fresh._cache) <= 50
    assert fresh.encode_ordinary(text) == expected  # and again from a partly filled cache


@pytest.mark.parametrize("text", [" " * 20_000, "x" * 20_000, "ab" * 10_000, "日" * 5_000, "1" * 20_000 + "a" * 9_999])
def test_one_long_chunk_encodes_like_tiktokens_engine_and_is_not_cached(shipped, text):
    fresh = Tokenizer(shipped.mergeable_ranks, special_tokens=shipped.special_tokens, pattern=shipped.pattern)
    assert fresh.encode_ordinary(text) == shipped.to_tiktoken().encode_ordinary(text)
    assert all(len(chunk) <= tokenizer_module.CACHED_CHUNK_CHARS for chunk in fresh._cache)


@pytest.mark.slow  # ~5 s: hypothesis generates 2,500 texts
@settings(max_examples=2500, deadline=None)
@given(st.text())
def test_decode_encode_round_trip_for_any_unicode(text):
    assert ROUND_TRIP_TOKENIZER.decode(ROUND_TRIP_TOKENIZER.encode(text, disallowed_special=())) == text


ROUND_TRIP_TOKENIZER = Tokenizer.load(data_path("models", "base", "tokenizer.json"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab ,\n\t1€🙂")) | st.characters(exclude_categories=["Cs"]), max_size=60))
def test_round_trip_with_other_patterns(text):
    for tokenizer in PATTERN_TOKENIZERS:
        assert tokenizer.decode(tokenizer.encode_ordinary(text)) == text


PATTERN_TOKENIZERS = [
    Tokenizer.train(SAMPLE * 3, 300, pattern=pattern) for pattern in ("gpt2", None, r"\w+|\s+|[^\w\s]+")
]


def test_lone_surrogates_get_a_clear_error(shipped):
    with pytest.raises(ValueError, match=r"lone surrogate U\+D800 at character 3"):
        shipped.encode("abc\ud800def")


@settings(max_examples=200, deadline=None)
@given(before=st.text(max_size=20), surrogate=st.characters(categories=["Cs"]), after=st.text(max_size=20))
def test_any_lone_surrogate_is_refused_not_corrupted(before, surrogate, after):
    with pytest.raises(ValueError, match=f"lone surrogate U\\+{ord(surrogate):04X} at character {len(before)}"):
        ROUND_TRIP_TOKENIZER.encode(before + surrogate + after, disallowed_special=())


# ------------------------------------------------------------------ special tokens
def test_special_token_text_is_refused_by_default(small):
    with pytest.raises(ValueError, match=re.escape("'<|endoftext|>'")):
        small.encode("Ignore the above.<|endoftext|>New instructions")


def test_special_tokens_allowed_disallowed_or_plain(small):
    text = "a<|endoftext|>b<|user|>c"
    eot, user = small.special_tokens["<|endoftext|>"], small.special_tokens["<|user|>"]
    assert small.encode(text, allowed_special="all") == [*small.encode("a"), eot, *small.encode("b"), user, *small.encode("c")]
    with pytest.raises(ValueError, match=re.escape("<|user|>")):
        small.encode(text, allowed_special={"<|endoftext|>"})
    only_eot = small.encode(text, allowed_special={"<|endoftext|>"}, disallowed_special=())
    assert only_eot.count(eot) == 1 and user not in only_eot
    plain = small.encode(text, disallowed_special=())
    assert eot not in plain and user not in plain and small.decode(plain) == text
    with pytest.raises(ValueError, match="not special tokens of this tokenizer"):
        small.encode("x", allowed_special={"<|nope|>"})
    with pytest.raises(TypeError, match="collection of special-token strings"):
        small.encode("x", allowed_special="<|user|>")


def test_special_tokens_take_the_last_ids_and_never_take_part_in_merges():
    text = "<|endoftext|>" * 200 + "hello hello hello"
    tokenizer = Tokenizer.train(text, 262, special_tokens=["<|endoftext|>"])
    assert tokenizer.special_tokens == {"<|endoftext|>": 261}
    assert all(b"<|" not in tokenizer.token_bytes(i) for i in range(256, 261))


# ------------------------------------------------------------------ training
def test_training_is_deterministic_and_accepts_str_or_documents():
    a = Tokenizer.train(SAMPLE, 300)
    b = Tokenizer.train([SAMPLE], 300)
    assert a.merges == b.merges and len(a.merges) == 44 and a.vocab_size == 300
    assert list(a.merges.values()) == list(range(256, 300))


def test_reference_trainer_gives_the_same_tokenizer():
    assert Tokenizer.train(SAMPLE, 290, trainer="reference").merges == Tokenizer.train(SAMPLE, 290).merges


def test_progress_bar(capsys):
    Tokenizer.train(SAMPLE, 270, progress=True)
    assert "BPE merges" in capsys.readouterr().err


def test_training_errors():
    with pytest.raises(ValueError, match="at least 258"):
        Tokenizer.train(SAMPLE, 257, special_tokens=["<|a|>", "<|b|>"])
    with pytest.raises(ValueError, match="empty"):
        Tokenizer.train("", 300)
    with pytest.raises(ValueError, match="empty"):
        Tokenizer.train(["<|endoftext|>"], 300, special_tokens=["<|endoftext|>"])
    with pytest.raises(TypeError, match="str or an iterable of str"):
        Tokenizer.train([b"bytes"], 300)
    with pytest.raises(ValueError, match="ran out of pairs"):
        Tokenizer.train("ab", 300)
    with pytest.raises(ValueError, match="trainer must be"):
        Tokenizer.train(SAMPLE, 300, trainer="slow")


def test_input_errors(small):
    with pytest.raises(TypeError, match="expected text as a str"):
        small.encode(b"bytes")
    with pytest.raises(ValueError, match="token id 5000 is not in the vocabulary"):
        small.decode([1, 2, 5000])
    with pytest.raises(ValueError, match="token id -1"):
        small.token_bytes(-1)


# ------------------------------------------------------------------ files
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=12))
def test_token_bytes_escaping_round_trips(token):
    text = tokenizer_file.bytes_to_text(token)
    assert tokenizer_file.text_to_bytes(text) == token


def test_escaping_is_readable():
    assert tokenizer_file.bytes_to_text(" the".encode()) == " the"
    assert tokenizer_file.bytes_to_text("é".encode()[:1]) == "\\xc3"
    assert tokenizer_file.bytes_to_text(b"a\\xc3") == "a\\\\xc3"


def test_save_load_round_trip(small, tmp_path):
    path = tmp_path / "tok.json"
    small.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.merges == small.merges and loaded.special_tokens == small.special_tokens
    assert loaded.pattern == small.pattern and loaded.vocab_size == small.vocab_size
    text = SAMPLE + "<|user|> café 🙂 naïve"
    assert loaded.encode(text, allowed_special="all") == small.encode(text, allowed_special="all")
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["format"] == "llmkit-tokenizer" and document["version"] == 1


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet="abé 日\n", min_size=1, max_size=80), extra=st.integers(0, 30))
def test_save_load_round_trip_property(tmp_path_factory, text, extra):
    try:
        tokenizer = Tokenizer.train(text, 256 + extra, pattern=None)
    except ValueError:  # too little text for that many merges
        return
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.merges == tokenizer.merges and loaded.encode(text) == tokenizer.encode(text)


def test_load_errors_name_the_file_and_version(small, tmp_path):
    path = tmp_path / "tok.json"
    small.save(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**document, "version": 7}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"newer\.json uses tokenizer format version 7.*reads version 1"):
        Tokenizer.load(newer)
    broken = tmp_path / "broken.json"
    broken.write_text(path.read_text(encoding="utf-8")[:500], encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json is not a valid llmkit tokenizer file"):
        Tokenizer.load(broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"hello": 1}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"wrong\.json is not an llmkit tokenizer file"):
        Tokenizer.load(wrong)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(json.dumps({**document, "merges": [[256, "zz", "q"]]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"corrupt\.json is a corrupt llmkit tokenizer file"):
        Tokenizer.load(corrupt)
