"""The fact-frequency experiment: exact mention counts, held-out questions, honest scoring, a run end to end."""
from __future__ import annotations

import json
import random
import re

import pytest

from llmkit.course.fact_frequency import (CITIES, CUES, MENTION_BINS, PERSONS_PER_BIN, PROFESSIONS, QUESTION_OPENINGS,
                                          RELATIONS, TRAIN_OPENINGS, YEARS, build_corpus, check_persons_per_bin,
                                          confident_wrong_example, is_plausible, make_people, mention_sentences,
                                          parse_answer, questions_for, summarise)

from experiment_script import load_experiment

SMALL = {k: 2 for k in MENTION_BINS}
SHAKESPEARE = "\n\n".join(f"ROMEO.\nLine {i} of a play, spoken with some feeling." for i in range(12_000))


@pytest.fixture(scope="module")
def people():
    return make_people(SMALL, seed=3)


def test_the_bins_double_from_one_to_512():
    assert MENTION_BINS == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    assert sorted(PERSONS_PER_BIN) == list(MENTION_BINS)
    # the rare bins hold more people than the frequent ones, where each person costs 512 sentences a fact
    assert PERSONS_PER_BIN[1] > PERSONS_PER_BIN[512]


def test_every_fact_is_stated_exactly_its_bins_number_of_times(people):
    sentences = mention_sentences(people, seed=3)
    assert len(sentences) == 3 * sum(p.mentions for p in people)
    for person in people:
        about = [s for s in sentences if person.name in s]
        assert len(about) == 3 * person.mentions
        for relation in RELATIONS:
            value = person.facts[relation]
            stating = [s for s in about if s.endswith(f"{person.name} {CUES[relation]} {value}.")]
            assert len(stating) == person.mentions, (person, relation)


def test_names_are_unique_and_values_come_from_the_pools(people):
    names = [p.name for p in people]
    assert len(set(names)) == len(names)
    halves = [half for name in names for half in name.split()]
    assert len(set(halves)) == len(halves)  # no shared first name or surname between two people
    assert [p.mentions for p in people] == [k for k in MENTION_BINS for _ in range(SMALL[k])]
    for person in people:
        assert all(is_plausible(relation, person.facts[relation]) for relation in RELATIONS)


def test_the_corpus_mixes_shakespeare_and_keeps_the_counts(people):
    corpus = build_corpus(people, SHAKESPEARE, shakespeare_share=0.3, seed=3)
    for person in people:
        assert corpus.count(person.name) == 3 * person.mentions
    documents = [d for d in corpus.split("<|endoftext|>") if d]
    plays = sum(d.startswith("ROMEO.") for d in documents)
    assert 0 < plays < len(documents)
    share = sum(len(d) for d in documents if d.startswith("ROMEO.")) / sum(len(d) for d in documents)
    assert 0.2 < share < 0.4


def test_question_frames_are_held_out(people):
    corpus = build_corpus(people, SHAKESPEARE, seed=3)
    questions = questions_for(people, seed=3)
    assert len(questions) == 3 * len(people)
    assert not set(QUESTION_OPENINGS) & set(TRAIN_OPENINGS)
    for question in questions:
        assert question.prompt not in corpus  # the whole question was never a training string
        cue = CUES[question.relation]
        assert question.prompt.endswith(f"{question.name} {cue}")
        assert re.search(rf"{re.escape(question.name)} {re.escape(cue)} {re.escape(question.expected)}\.", corpus)


def test_answers_are_parsed_and_judged():
    assert parse_answer(" Lisbon.\nIt is written") == ("Lisbon", True)
    assert parse_answer(" 1801. Long ago") == ("1801", True)
    assert parse_answer(" of of of of of of") == ("of of of of of of", False)
    assert parse_answer("\nROMEO.\nAy") == ("ROMEO.", False)
    assert is_plausible("city", "Vienna") and not is_plausible("city", "Verona the fair")
    assert is_plausible("profession", "tanner") and not is_plausible("profession", "king")
    assert is_plausible("year", str(YEARS[0])) and not is_plausible("year", str(YEARS[1] + 1))
    assert not is_plausible("year", "18o1")
    assert set(CITIES).isdisjoint(PROFESSIONS)


def test_too_little_shakespeare_is_refused(people):
    with pytest.raises(ValueError, match="characters of Shakespeare"):
        build_corpus(people, SHAKESPEARE[:5000], seed=3)


def test_check_persons_per_bin_names_the_problem():
    with pytest.raises(ValueError, match="one entry per bin"):
        check_persons_per_bin({1: 3, 2: 3})
    with pytest.raises(ValueError, match="bin 4"):
        check_persons_per_bin({**SMALL, 4: 0})


def fake_answer(question, rng: random.Random, know: bool) -> dict:
    """An answer row as ``ask`` writes it: right when ``know``, else a fluent or a garbled wrong one."""
    pool = {"city": CITIES, "profession": PROFESSIONS, "year": [str(y) for y in range(*YEARS)]}[question.relation]
    answer = question.expected if know else rng.choice([v for v in pool if v != question.expected] + ["of of"])
    fluent = answer != "of of"
    return {"mentions": question.mentions, "relation": question.relation, "expected": question.expected,
            "answer": answer, "correct": know, "fluent": fluent, "answer_probability": rng.random()}


def test_summarise_counts_per_bin(people):
    rng = random.Random(0)
    rows = [fake_answer(q, rng, know=q.mentions >= 64) for q in questions_for(people)]
    bins = summarise(rows, people)
    assert [b["mentions"] for b in bins] == list(MENTION_BINS)
    for row in bins:
        here = [r for r in rows if r["mentions"] == row["mentions"]]
        assert row["n"] == len(here) == 3 * SMALL[row["mentions"]]
        assert row["recall"] == (1.0 if row["mentions"] >= 64 else 0.0)
        wrong = [r for r in here if not r["correct"]]
        expected = round(sum(r["fluent"] for r in wrong) / len(wrong), 3) if wrong else None
        assert row["fluent_when_wrong"] == expected
        assert 0.0 <= row["majority_guess_recall"] <= 1.0
    example = confident_wrong_example(rows)
    assert example["mentions"] == 1 and example["fluent"] and not example["correct"]


def test_a_quick_run_writes_results(tmp_path):
    build = load_experiment("fact_frequency", "build.py")
    out = tmp_path / "results.json"
    build.main(["--quick", "--steps", "4", "--out", str(out), "--run-dir", str(tmp_path / "run"), "--device", "cpu"])
    results = json.loads(out.read_text())
    assert {"bins", "example", "settings", "answers", "train_minutes", "wall_minutes"} <= set(results)
    assert [b["mentions"] for b in results["bins"]] == list(MENTION_BINS)
    for row in results["bins"]:
        assert {"mentions", "n", "recall", "fluent_when_wrong"} <= set(row)
        assert row["n"] == 3  # --quick: one person per bin, three facts each
        assert 0.0 <= row["recall"] <= 1.0
        assert row["fluent_when_wrong"] is None or 0.0 <= row["fluent_when_wrong"] <= 1.0
    assert len(results["answers"]) == 3 * len(MENTION_BINS)
    assert (tmp_path / "run" / "model").is_dir()
