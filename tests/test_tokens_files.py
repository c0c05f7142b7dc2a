"""Tokenizer files and vocabularies that would corrupt encoding are refused, by name; saves are atomic."""
from __future__ import annotations

import json
import os
import time

import pytest

import llmkit.files
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.tokens import file as tokenizer_file
from llmkit.tokens.pattern import BACKTRACK_PROBES, resolve_pattern, splitter
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.tokens.vocab import MAX_UNUSED_IDS

SAMPLE = "the cat sat on the mat. The cats sat, 123 times! " * 4


@pytest.fixture(scope="module")
def small():
    return Tokenizer.train(SAMPLE, 270, special_tokens=["<|endoftext|>", "<|user|>"])


@pytest.fixture
def saved(small, tmp_path):
    """(path, document) of the small tokenizer saved as a file; edit the document to break it."""
    path = tmp_path / "tokenizer.json"
    small.save(path)
    return path, json.loads(path.read_text(encoding="utf-8"))


def write(path, document):
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def load_error(path) -> str:
    with pytest.raises(ValueError) as info:
        Tokenizer.load(path)
    message = str(info.value)
    assert str(path) in message, "the error must name the file"
    return message


# ------------------------------------------------------------------ ids in files
@pytest.mark.parametrize("edit, problem", [
    (lambda d: d["special_tokens"].update({"<|user|>": 10**9}), "far beyond"),
    (lambda d: d["special_tokens"].update({"<|user|>": -1}), "whole numbers >= 0"),
    (lambda d: d["special_tokens"].update({"<|user|>": 299.0}), "whole numbers >= 0"),
    (lambda d: d["special_tokens"].update({"<|user|>": True}), "whole numbers >= 0"),
    (lambda d: d["special_tokens"].update({"": 301}), "non-empty string"),
    (lambda d: d["special_tokens"].update({"<|user|>": 5}), "already belongs to"),
    (lambda d: d["special_tokens"].update({"<|user|>": d["special_tokens"]["<|endoftext|>"]}), "already belongs to"),
    (lambda d: d["byte_ids"].__setitem__(3, 3.0), "byte 3 has the id 3.0"),
    (lambda d: d["byte_ids"].__setitem__(3, 4), "both have the id 4"),
    (lambda d: d["byte_ids"].__setitem__(3, "3"), "byte 3 has the id '3'"),
    (lambda d: d["byte_ids"].pop(), "256 bytes"),
    (lambda d: d["merges"].append(list(d["merges"][0])), "repeats the merge"),
    (lambda d: d["merges"].append([299, *d["merges"][0][1:]]), "repeats the merge"),
    (lambda d: d["merges"][5].__setitem__(0, 256), "both have the id 256"),
    (lambda d: d["merges"][5].__setitem__(0, -7), "whole numbers >= 0"),
    (lambda d: d["merges"][5].__setitem__(0, 261.5), "whole numbers >= 0"),
    (lambda d: d["merges"].__setitem__(5, [261, "a"]), "must be \\[new id, left piece, right piece\\]"),
    (lambda d: d["merges"].__setitem__(5, [261, 7, "a"]), "pieces as strings"),
    (lambda d: d.pop("special_tokens"), "missing field 'special_tokens'"),
])
def test_bad_ids_in_a_file_are_refused_by_name(saved, edit, problem):
    path, document = saved
    edit(document)
    message = load_error(write(path, document))
    assert problem.replace("\\", "") in message, message


def test_bad_ids_errors_match_their_problem(saved):
    """The table above matches substrings; spot-check one message whole for its fix."""
    path, document = saved
    document["special_tokens"]["<|user|>"] = 10**9
    message = load_error(write(path, document))
    assert "1000000000" in message and f"at most {MAX_UNUSED_IDS} unused ids" in message


def test_a_pattern_that_drops_text_is_refused(saved):
    path, document = saved
    document["pattern"] = r"\p{L}+"
    message = load_error(write(path, document))
    assert "does not match every character" in message and "Hello" in message


def test_a_pattern_that_backtracks_catastrophically_is_refused(saved):
    path, document = saved
    document["pattern"] = r"(a|aa)+$|\s+|\S"
    start = time.monotonic()
    message = load_error(write(path, document))
    assert "backtracks catastrophically" in message
    assert time.monotonic() - start < 30  # bounded: a probe times out instead of running for minutes


def test_a_folder_or_device_is_not_read(tmp_path):
    with pytest.raises(ValueError, match="not a regular file"):
        Tokenizer.load(tmp_path)
    if os.path.exists("/dev/zero"):
        with pytest.raises(ValueError, match="not a regular file"):
            Tokenizer.load("/dev/zero")


# ------------------------------------------------------------------ the same rules for any constructor
def test_constructor_checks_ids_like_the_file(small):
    ranks = small.mergeable_ranks
    with pytest.raises(ValueError, match="far beyond"):
        Tokenizer(ranks, special_tokens={"<|endoftext|>": 10**9})
    with pytest.raises(ValueError, match="non-empty string"):
        Tokenizer(ranks, special_tokens={"": 400})
    with pytest.raises(ValueError, match="whole numbers >= 0"):
        Tokenizer({**ranks, b"zz": -1})
    with pytest.raises(ValueError, match="both have the id"):
        Tokenizer({**ranks, b"zz": 0})
    with pytest.raises(ValueError, match="non-empty bytes"):
        Tokenizer({**ranks, "zz": 400})
    gap = max(ranks.values()) + MAX_UNUSED_IDS  # a gap this size is still allowed (cl100k leaves some)
    assert Tokenizer(ranks, special_tokens={"<|endoftext|>": gap}).vocab_size == gap + 1


# ------------------------------------------------------------------ pre-split patterns
def test_custom_patterns_that_lose_text_are_refused_everywhere():
    for make in (lambda: Tokenizer.train(SAMPLE, 260, pattern=r"\w+"), lambda: resolve_pattern(r"[a-z]+|\d")):
        with pytest.raises(ValueError, match="does not match every character"):
            make()


def test_a_custom_pattern_that_passes_the_probes_still_cannot_drop_text():
    # Matches every probe character, but not "§": the check on real text catches it.
    split = splitter(r"[^§]")
    assert split("ab") == ["a", "b"]
    with pytest.raises(ValueError, match="does not match every character"):
        split("a§b")


def test_custom_patterns_run_under_a_time_limit(monkeypatch):
    from llmkit.tokens import pattern

    slow = r"(?:x|xx)+y|\s|[^x]|x"  # fine on the probes (no long run of x), exponential on xxx...z
    split = splitter(slow)
    assert split("xy ab") == ["xy", " ", "a", "b"]
    monkeypatch.setattr(pattern, "BASE_SECONDS", 0.2)
    start = time.monotonic()
    with pytest.raises(ValueError, match="did not finish on 41 characters"):
        split("x" * 40 + "z")
    assert time.monotonic() - start < 30


def test_a_capturing_group_is_refused_with_the_fix():
    # findall returns only a group's text when a pattern has one, which would lose the rest
    with pytest.raises(ValueError, match=r"capturing group.*\(\?:"):
        resolve_pattern(r"(\w)\w*|\s+|[^\w\s]+")


def test_the_named_patterns_pass_every_probe_quickly():
    for name in ("gpt4", "gpt2", "spaced"):
        split = splitter(name)
        for probe in BACKTRACK_PROBES:
            assert "".join(split(probe)) == probe


@settings(max_examples=60, deadline=None)
@given(word=st.text(alphabet="abcxyzéßΩ", min_size=1, max_size=12),
       before=st.sampled_from([" ", '"', "_", "(", "\n", " '", "", "  "]), after=st.sampled_from([" ", '"', "_", "?", ""]))
def test_the_spaced_pattern_cuts_a_word_the_same_whatever_stands_beside_it(word, before, after):
    """The course pattern's point: " Pune", '"Pune"' and "get_Pune" all hold the chunk "Pune"."""
    chunks = splitter("spaced")(before + word + after)
    assert "".join(chunks) == before + word + after
    assert word in chunks
    gpt4 = splitter("gpt4")(" " + word)
    assert gpt4 == [" " + word]  # where GPT-4's pattern gives the word its space


def test_a_spaced_tokenizer_encodes_a_word_as_the_same_tokens_in_a_sentence_a_json_string_and_a_name():
    text = "Will it rain in Bishkek? {\"city\": \"Bishkek\"} get_Bishkek_forecast Bishkek " * 20
    tokenizer = Tokenizer.train([text], 270, pattern="spaced")
    word = tokenizer.encode_ordinary("Bishkek")
    for context in (" Bishkek", '"Bishkek"', "_Bishkek_"):
        ids = tokenizer.encode_ordinary(context)
        assert any(ids[i:i + len(word)] == word for i in range(len(ids))), context


# ------------------------------------------------------------------ saving
@settings(max_examples=25, deadline=None)
@given(text=st.text(alphabet="ab é日\n🙂", min_size=4, max_size=120), extra=st.integers(0, 20))
def test_save_then_load_is_exact(tmp_path_factory, text, extra):
    try:
        tokenizer = Tokenizer.train(text, 256 + extra + 1, special_tokens=["<|endoftext|>"])
    except ValueError:  # too little text for that many merges
        return
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.merges == tokenizer.merges and loaded.mergeable_ranks == tokenizer.mergeable_ranks
    assert loaded.special_tokens == tokenizer.special_tokens and loaded.pattern == tokenizer.pattern
    loaded.save(path.with_name("again.json"))
    assert path.with_name("again.json").read_bytes() == path.read_bytes()


def test_a_failed_save_leaves_the_old_file_and_no_temporary(small, tmp_path, monkeypatch):
    path = tmp_path / "tokenizer.json"
    small.save(path)
    before = path.read_bytes()

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(llmkit.files.os, "fsync", crash)  # the tokenizer saves through llmkit.files
    with pytest.raises(OSError, match="disk full"):
        small.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]
