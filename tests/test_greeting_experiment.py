"""data/experiments/greeting/: greets_by_name beside memory; the committed results are the evals' conversations."""
import json

from experiment_script import EXPERIMENTS, load_experiment

FOLDER = EXPERIMENTS / "greeting"
SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")


def test_the_shipped_models_memory_figures_equal_its_evals_report():
    """The script scores the evals stage's own conversations, so memory agrees to the last digit."""
    results = json.loads((FOLDER / "results.json").read_text())
    assert results["per_kind"] == 100
    evals = json.loads((EXPERIMENTS.parent / "models" / "chat" / "evals.json").read_text())
    shipped = results["models"]["shipped"]
    for split in SPLITS:
        assert shipped[split]["memory"] == evals[split]["memory"]
        assert shipped[split]["n_greets_by_name"] == 100


def test_the_no_restart_figures_are_that_runs_model():
    """``no_restart`` is ``../polish_no_restart/``'s chat model: its memory equals that run's evals."""
    measured = json.loads((FOLDER / "results.json").read_text())["models"]["no_restart"]
    evals = json.loads((EXPERIMENTS / "polish_no_restart" / "evals" / "evals.json").read_text())
    for split in SPLITS:
        assert measured[split]["memory"] == evals[split]["memory"]


def test_first_replies_are_sorted_into_every_kind_and_add_up():
    measure = load_experiment("greeting", "measure.py")
    for model in json.loads((FOLDER / "results.json").read_text())["models"].values():
        for split, replies in model["first_replies"].items():
            assert set(replies["counts"]) == set(measure.REPLIES) and sum(replies["counts"].values()) == 100
    text = lambda words: [{"role": "assistant", "content": [{"type": "text", "text": words}]}]  # noqa: E731
    assert measure.reply_kind("Wei", text("Nice to meet you, Wei!")) == "a greeting with the name"
    assert measure.reply_kind("Wei", text("I have no tool for the as Wei, so I can't know it.")) == "a refusal"
    assert measure.reply_kind("Wei", text("I have no tool for the name, so I can't know it.")) == "a refusal"
    assert measure.reply_kind("Wei", text("Nice to meet you, flooded!")) == "a greeting, another word"
    assert measure.reply_kind("Wei", text("You're integer!")) == "other"
    call = [{"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "x", "input": {}}]}]
    assert measure.reply_kind("Wei", call) == "a tool call"
