"""data/experiments/learner_trial/trial.py: the checks of a learner's requests, and a run on a tiny model."""
import pytest

from experiment_script import load_experiment

trial = load_experiment("learner_trial", "trial.py")


@pytest.mark.parametrize("made, right", [
    (("count_letters", {"word": "Excellence ", "letter": "e"}), True),   # case and outer spaces do not matter
    (("count_letters", {"word": "excellenc", "letter": "e"}), False),
    (("count_letters", {"word": "excellence"}), False),                 # an argument missing
    (("count_letters", {"word": "excellence", "letter": "e", "x": 1}), False),  # one too many
    (("calculator", {"word": "excellence", "letter": "e"}), False),     # the wrong tool
])
def test_call_matches_compares_name_and_every_argument(made, right):
    assert trial.call_matches(made, ("count_letters", {"word": "excellence", "letter": "e"})) is right


def test_numbers_compare_as_numbers_but_not_as_booleans():
    wanted = ("add", {"a": 1, "b": 25})
    assert trial.call_matches(("add", {"a": 1.0, "b": 25}), wanted)
    assert not trial.call_matches(("add", {"a": True, "b": 25}), wanted)
    assert not trial.call_matches(("add", {"a": "1", "b": 25}), wanted)


def test_score_of_a_hand_made_transcript():
    case = trial.Case("add", ["Add 17 and 25."], [trial.add], [("add", {"a": 17, "b": 25})], "42")
    transcript = [{"role": "user", "content": "Add 17 and 25."},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add",
                                                     "input": {"a": 17, "b": 25}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "17 + 25 = 42."}]}]
    assert trial.score(case, transcript, "17 + 25 = 42.", "end_turn", True) == {
        "fitted": True, "right_calls": True, "answer_has": True, "ends_turn": True,
        "calls": [{"name": "add", "input": {"a": 17, "b": 25}}]}
    looped = trial.score(case, transcript, "42 is it 42 is it 42 is it 42 is it", "end_turn", True)
    assert looped["ends_turn"] is False and looped["answer_has"] is True
    assert trial.score(case, transcript[:1], "", "context_window", False)["right_calls"] is False


def test_the_learner_tools_run_and_the_cases_are_well_formed():
    assert trial.add(17, 25) == 42 and trial.forecast("Paris")["high"] == 21
    assert trial.convert_currency(40, "EUR") == 36.0
    for case in trial.CASES:
        names = {tool.name for tool in case.tools}
        assert all(name in names for name, _ in case.calls), case.name  # a wanted call is to an offered tool


def test_a_trial_on_a_tiny_random_model_scores_every_case(tiny_llama, tokenizer, one_thread, capsys):
    from llmkit.chat.client import Client

    model = tiny_llama(tokenizer.vocab_size, context_length=128)  # too small for some prompts: they must not crash
    results = trial.trial(Client.from_model(model, tokenizer), trial.CASES[:3] + trial.CASES[-2:])
    assert results["n"] == 5 and len(results["cases"]) == 5
    assert results["fitted"] < 5  # the five-tool prompt (213 tokens) cannot fit 128
    assert all(row["stop_reason"] for row in results["cases"])
    assert 0 <= results["right_calls"] <= results["fitted"]
    trial.report({"model": "tiny", "seconds": 0.0, **results})
    printed = capsys.readouterr().out
    assert printed.count("\n[") == 5 and "ContextWindowError" in printed  # every case, the one that did not fit
    assert f"right calls {results['right_calls']}/5" in printed and f"fitted {results['fitted']}/5" in printed


@pytest.mark.parametrize("reply, wanted, found", [
    ("The result is 5555.", "5555", True), ("The result is 555555.", "5555", False),
    ("strawberry has 3 r's.", "3 r", True), ("31% chance of rain", "3 r", False),
    ("You're ROHAN.", "Rohan", True), ("Rohana", "Rohan", False)])
def test_says_finds_whole_words_only(reply, wanted, found):
    assert trial.says(reply, wanted) is found
