"""data/experiments/english_base/: a base pretrained further with modern English, and the chat model from it."""
import json
from pathlib import Path

import pytest

from experiment_script import EXPERIMENTS, load_experiment

FOLDER = EXPERIMENTS / "english_base"


@pytest.fixture(scope="module")
def bases():
    return load_experiment("english_base", "bases.py")


def test_the_recorded_shipped_base_scores_are_the_ones_its_stage_recorded(bases):
    """The record's "shipped" column is the committed base: the pretrain stage measured the same two texts."""
    record = json.loads((FOLDER / "bases.json").read_text())
    figures = json.loads((EXPERIMENTS.parent / "models" / "base" / "stages" / "pretrain" / "done.json").read_text())
    shipped = record["bits_per_byte"]["shipped"]
    assert shipped["shakespeare"] == pytest.approx(figures["figures"]["heldout_bpb_shakespeare"], abs=1e-4)
    assert shipped["structured"] == pytest.approx(figures["figures"]["heldout_bpb_structured"], abs=1e-4)
    assert set(record["bytes"]) == set(shipped) == set(record["bits_per_byte"]["english"])
    folders = [spec.split("=", 1)[1].strip() for spec in record["command"].split("--model ")[1:]]
    assert folders == ["data/models/base", "RUN/pretrain_english/shipped"]  # no machine's paths


def test_the_held_out_texts_are_the_ones_the_english_corpus_kept_apart(bases):
    from llmkit.course.recipe_stages import dictionary_documents

    settings = bases.corpus_settings()
    texts = bases.held_out_texts()
    train, heldout = dictionary_documents(settings["dictionary_entries_per_document"],
                                          settings["heldout_dictionary_entries"], seed=settings["seed"])
    assert texts["dictionary"] == heldout and not set(heldout.splitlines()) & set("\n".join(train).splitlines())
    assert texts["requests_seen"] != texts["requests_unseen_phrasings_and_tools"]
    assert len(texts["requests_seen"].splitlines()) == bases.REQUESTS


def test_a_run_folder_is_recorded_without_the_machines_path(bases, tmp_path):
    assert bases.portable(str(tmp_path / "pretrain_english" / "shipped")) == "RUN/pretrain_english/shipped"
    assert bases.portable("data/models/base") == str(Path("data/models/base"))


def test_both_chat_models_were_scored_on_the_same_conversations():
    record = json.loads((FOLDER / "results.json").read_text())
    shipped, english = record["models"]["shipped"]["evals"], record["models"]["english"]["evals"]
    assert set(shipped) == set(english) == {"seen", "unseen_values", "unseen_phrasings_and_tools"}
    for split in shipped:
        for score in ("right_tool", "args_exact", "answer_from_result", "ends_turn", "memory"):
            assert shipped[split][f"n_{score}"] == english[split][f"n_{score}"]  # the same conversations
            assert 0.0 <= english[split][score] <= 1.0
    assert record["per_kind"] == 50 and "RUN/sft_skills/shipped" in record["command"]
