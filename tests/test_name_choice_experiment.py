"""data/experiments/name_choice/measure.py runs end to end on a tiny model and reports every
decoding on both splits."""
from __future__ import annotations

import pytest

from experiment_script import load_experiment

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_script_measures_three_decodings_on_both_splits(tmp_path, tiny_llama, tokenizer):
    from llmkit.model.weights import save

    measure = load_experiment("name_choice", "measure.py")
    save(tiny_llama(tokenizer.vocab_size, context_length=1024), tmp_path)
    tokenizer.save(tmp_path / "tokenizer.json")
    results = measure.measure(tmp_path, per_kind=1, kinds=["tool"])
    assert set(results) == {"free", "per_token", "whole"}
    for by_split in results.values():
        assert set(by_split) == {"seen", "unseen_phrasings_and_tools"}
        assert all(0.0 <= by_split["seen"][score] <= 1.0 for score in ("right_tool", "ends_turn"))
    assert "right_tool" in measure.table(results)
