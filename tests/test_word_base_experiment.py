"""data/experiments/word_base/compare.py: two checkpoints measured alike, the probe of two runs
side by side, and the committed results that the README quotes."""
from __future__ import annotations

import json

import pytest

from experiment_script import EXPERIMENTS, load_experiment

pytestmark = pytest.mark.usefixtures("one_thread")

FOLDER = EXPERIMENTS / "word_base"
SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")


def _script():
    return load_experiment("word_base", "compare.py")


def _log(path, probes: dict[int, float]) -> None:
    rows = [{"kind": "train", "step": 5, "loss": 1.0}]
    for step, value in probes.items():
        probe = {split: {"right_tool": value, "args_exact": value / 2, "copy_in_prompt": value / 4}
                 for split in ("seen", "unseen_phrasings_and_tools")}
        rows.append({"kind": "eval", "step": step, "heldout_loss": 1.0 - value, "probe": probe})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_probe_rows_keep_the_steps_both_runs_probed(tmp_path):
    _log(tmp_path / "a.jsonl", {0: 0.1, 100: 0.5, 200: 0.6})
    _log(tmp_path / "b.jsonl", {0: 0.2, 100: 0.8})
    rows = _script().probe_rows({"a": tmp_path / "a.jsonl", "b": tmp_path / "b.jsonl"})
    assert [row["step"] for row in rows] == [0, 100]
    assert rows[1]["a"] == {"heldout_loss": 0.5, "right_tool": 0.5, "args_exact": 0.25, "copy_in_prompt": 0.125}
    assert rows[1]["b"]["right_tool"] == 0.8


def test_the_committed_logs_probe_every_hundred_steps_of_sft_skills():
    from llmkit.paths import data_path

    rows = _script().probe_rows({"shipped": data_path("models", "skills", "stages", "sft_skills", "train_log.jsonl"),
                                 "words": FOLDER / "sft_skills_words" / "train_log.jsonl"})
    assert [row["step"] for row in rows] == list(range(0, 1201, 100))
    for row in rows:
        for name in ("shipped", "words"):
            assert all(0.0 <= row[name][score] <= 1.0 for score in ("right_tool", "args_exact", "copy_in_prompt"))
    done = json.loads((FOLDER / "sft_skills_words" / "done.json").read_text())
    assert done["figures"]["step"] == 1200 and done["figures"]["heldout_loss"] == pytest.approx(rows[-1]["words"]["heldout_loss"], abs=1e-3)


def test_measure_scores_a_model_on_three_splits(tmp_path, tiny_llama, tokenizer):
    from llmkit.course.skills import MIX
    from llmkit.model.weights import save

    save(tiny_llama(tokenizer.vocab_size, context_length=1024), tmp_path)
    tokenizer.save(tmp_path / "tokenizer.json")
    result = _script().measure(tmp_path, per_kind=1, conversations=3)
    assert set(result["argument_copy"]) == set(result["evals"]) == set(SPLITS)
    for split in SPLITS:
        copy = result["argument_copy"][split]
        assert copy["n"] > 0 and 0.0 <= copy["right"] <= copy["first_token"] <= 1.0
        assert result["evals"][split]["n_right_tool"] == len(MIX)  # one conversation per kind
    assert result["seconds"] > 0


def test_the_committed_results_compare_like_with_like():
    from llmkit.course.skills import MIX

    results = json.loads((FOLDER / "results.json").read_text())
    assert set(results["models"]) == {"shipped", "words"}
    for split in SPLITS:
        copies = [model["argument_copy"][split] for model in results["models"].values()]
        assert len({(c["n"], c["n_later"]) for c in copies}) == 1  # the same values asked of both
        for model in results["models"].values():
            scores = model["evals"][split]
            assert scores["n_right_tool"] == results["per_kind"] * len(MIX)
            assert "tool_call_valid" in scores  # calls_made is newer than some committed results
            assert all(0.0 <= scores[s] <= 1.0 for s in _script().EVAL_SCORES if s in scores)
