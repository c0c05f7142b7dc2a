"""data/experiments/copy_circuit/words.py measures copying on real word lists: every id of the
second saying, and the ids that follow a space."""
from __future__ import annotations

import random

import pytest

from experiment_script import load_experiment

pytestmark = pytest.mark.usefixtures("one_thread")


def _script():
    return load_experiment("copy_circuit", "words.py")


def test_list_copy_reports_fractions_and_a_fresh_model_copies_little(tiny_llama):
    from llmkit.paths import data_path
    from llmkit.tokens.tokenizer import Tokenizer

    spaced = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    rng = random.Random(0)
    scores = _script().list_copy(tiny_llama(spaced.vocab_size, context_length=256).eval(), spaced,
                                 lambda: rng.choice(["tide", "level", "harbor", "plimbo"]), lists=3)
    assert set(scores) == {"every_id", "after_a_space"}
    assert 0.0 <= scores["every_id"] <= 1.0 and 0.0 <= scores["after_a_space"] < 0.5


def test_without_a_lone_space_id_there_is_no_after_a_space_score(tiny_llama):
    from llmkit.tokens.tokenizer import Tokenizer

    # GPT-4's pre-split keeps the space with the word: " harbor" becomes one id, never a space alone
    tokenizer = Tokenizer.train("List: harbor harbor\nAgain: harbor harbor\n" * 20, 256 + 13, pattern="gpt4")
    assert tokenizer.encode_ordinary(" harbor") == [tokenizer.encode_single_token(" harbor")]
    scores = _script().list_copy(tiny_llama(tokenizer.vocab_size, context_length=256).eval(), tokenizer,
                                 lambda: "harbor", lists=2)
    assert scores["after_a_space"] is None and 0.0 <= scores["every_id"] <= 1.0
