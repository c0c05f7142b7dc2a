"""data/experiments/held_out_factors/: the one-factor splits, measured beside the evals' own splits."""
import json

import pytest

from experiment_script import EXPERIMENTS, load_experiment

FOLDER = EXPERIMENTS / "held_out_factors"


def test_scores_pool_over_kinds_by_how_many_each_scored():
    script = load_experiment("held_out_factors", "measure.py")
    by_kind = {"a": {f"n_{s}": 10 for s in script.SCORES} | {s: 1.0 for s in script.SCORES},
               "b": {f"n_{s}": 30 for s in script.SCORES} | {s: 0.5 for s in script.SCORES},
               "c": {f"n_{s}": 99 for s in script.SCORES} | {s: 0.0 for s in script.SCORES}}
    pooled = script.pooled(by_kind, ["a", "b"])
    assert pooled["args_exact"] == (10 * 1.0 + 30 * 0.5) / 40 and pooled["n_args_exact"] == 40


def test_a_model_is_a_folder_by_path_or_a_shipped_model_by_name(tmp_path):
    script = load_experiment("held_out_factors", "measure.py")
    from llmkit.paths import data_path

    assert script.model_folder(str(tmp_path)) == tmp_path
    assert script.model_folder("chat") == data_path("models", "chat")


def test_the_committed_results_hold_each_split_of_the_same_model_and_conversations():
    script = load_experiment("held_out_factors", "measure.py")
    from llmkit.course.skill_conversation import SPLIT_SOURCES

    results = json.loads((FOLDER / "results.json").read_text())
    evals = json.loads((EXPERIMENTS.parent / "models" / results["model"] / "evals.json").read_text())
    kinds = results["kinds"]
    assert kinds == script.argument_kinds(evals) and "tool" in kinds and "memory" not in kinds
    assert list(results["greedy"]) == list(script.FACTOR_SPLITS)
    for split in script.OUTER_SPLITS:  # taken from evals.json, not measured again
        assert results["greedy"][split] == script.pooled(evals[split]["kinds"], kinds)
    for split in script.ONE_FACTOR_SPLITS:
        held_out = [part for part, source in zip(("phrasings", "tools", "values"), SPLIT_SOURCES[split])
                    if source == "heldout"]
        assert len(held_out) == 2 and "values" in held_out  # one factor more than unseen_values
        assert results["greedy"][split] == script.pooled(results["measured_by_kind"][split], kinds)
        assert results["greedy"][split]["n_args_exact"] == results["per_kind"] * len(kinds)
    for split, copy in results["argument_copy"].items():
        assert copy["n"] > 100 and 0 <= copy["right"] <= copy["first_token"] <= 1


@pytest.mark.parametrize("run", ["open_chain", "polish_open"])
def test_another_runs_results_are_that_runs_model_and_conversations(run):
    script = load_experiment("held_out_factors", "measure.py")

    results = json.loads((FOLDER / f"{run}.json").read_text())
    evals = json.loads((EXPERIMENTS / run / "evals" / "evals.json").read_text())
    shipped = json.loads((FOLDER / "results.json").read_text())
    assert f"--model {results['model']} " in results["command"]  # that run's folder, named in the command
    assert results["command"].endswith(f"--out data/experiments/held_out_factors/{run}.json")
    assert results["kinds"] == shipped["kinds"] == script.argument_kinds(evals)
    for split in script.OUTER_SPLITS:
        assert results["greedy"][split] == script.pooled(evals[split]["kinds"], results["kinds"])
    for split in script.ONE_FACTOR_SPLITS:
        assert results["greedy"][split] == script.pooled(results["measured_by_kind"][split], results["kinds"])
        assert results["greedy"][split]["n_args_exact"] == shipped["greedy"][split]["n_args_exact"]
