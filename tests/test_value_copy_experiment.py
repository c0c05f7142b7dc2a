"""data/experiments/value_copy/: the shipped chat model's skill evals with values chosen whole and as written."""
import json

import pytest

from experiment_script import EXPERIMENTS, load_experiment

FOLDER = EXPERIMENTS / "value_copy"
HARDEST = "unseen_phrasings_and_tools"


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads((FOLDER / "results.json").read_text())


def test_failure_names_what_went_wrong_first():
    failure = load_experiment("value_copy", "compare.py").failure
    weather = [("get_weather", {"city": "Pune", "day": "today"})]
    call = {"name": "get_weather", "input": {"city": "Pune", "day": "today"}}
    assert failure(weather, [call]) == "exact"
    assert failure(weather, [call, call]) == "extra_calls"
    assert failure(weather, []) == "no_call"
    assert failure(weather, [{"name": "calculator", "input": {"expression": "1"}}]) == "wrong_tool"
    assert failure(weather, [{"name": "get_weather", "input": {"city": "Deciding", "day": "today"}}]) == "wrong_args"
    two = weather + [("calculator", {"expression": "2 + 2"})]
    assert failure(two, [call, {"name": "calculator", "input": {"expression": "2 +"}}]) == "later_call_wrong"


def test_the_results_are_the_recipes_evals_in_both_modes(results):
    from llmkit.course.forced_scores import TOOL_CALLING_KINDS
    from llmkit.course.skills import EVAL_SPLITS, MIX
    from llmkit.paths import data_path

    assert results["command"].startswith("python data/experiments/value_copy/compare.py")
    assert results["settings"] == json.loads(data_path("models", "recipe", "evals.json").read_text())
    assert set(results["modes"]) == {"on", "copy"}
    on, copy = (results["modes"][mode] for mode in ("on", "copy"))
    for split in EVAL_SPLITS:
        assert set(on["evals"][split]["kinds"]) == set(MIX)
        for kind, scores in on["evals"][split]["kinds"].items():  # the same conversations in both modes
            assert copy["evals"][split]["kinds"][kind]["n_right_tool"] == scores["n_right_tool"]
    for mode in (on, copy):
        assert set(mode["failures"]) == set(TOOL_CALLING_KINDS)
        for kind, counts in mode["failures"].items():
            assert sum(counts.values()) == results["per_kind"]
            # the breakdown replays the evals' own conversations of the kind: its exact calls are theirs
            # (a batch of other neighbours can round a near-tie the other way, so one either side)
            kind_scores = mode["evals"][HARDEST]["kinds"][kind]
            assert abs(counts.get("exact", 0) - kind_scores["args_exact"] * kind_scores["n_args_exact"]) <= 1.5


def test_decapitalising_keeps_only_the_citys_capitals_and_the_counts_add_up():
    script = load_experiment("value_copy", "capitals.py")
    written = "Rain check for Kyoto today. Much obliged. Give me Mumbai's outlook. KYOTO?"
    assert script.decapitalised(written, {"Kyoto", "Mumbai"}) == \
        "rain check for Kyoto today. much obliged. give me Mumbai's outlook. kyoto?"
    result = json.loads((FOLDER / "capitals.json").read_text())
    assert result["command"].startswith("python data/experiments/value_copy/capitals.py") and result["seconds"] > 0
    for version in result["versions"].values():
        assert version["exact_first_call"] <= version["right_city"] <= result["n"]
    written, lowered = (result["versions"][v]["example"] for v in ("as_written", "decapitalised"))
    assert written.lower() == lowered.lower() and written != lowered
