"""The strawberry experiment from a speller (data/experiments/strawberry/build.py): its data and a quick run."""
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from llmkit.course import spelling, strawberry
from llmkit.course.values import value_split
from llmkit.model.weights import TOKENIZER_FILE, model_folder
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.tokens.words import word_ids

from experiment_script import load_experiment


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.load(model_folder("base") / TOKENIZER_FILE)


@pytest.fixture(scope="module")
def heldout_words():
    return strawberry.heldout_words()


@pytest.fixture(scope="module")
def sampler(tokenizer, heldout_words):
    every = set(heldout_words["real"]) | set(heldout_words["invented"])
    return spelling.WordSampler(tokenizer, spelling.token_contexts(tokenizer),
                                spelling.corpus_words(data_path("corpus", "train.txt")), every)


def texts(conversation) -> str:
    """Every string a conversation shows the model (questions, answers, thinking, tool calls)."""
    return json.dumps(conversation.messages, ensure_ascii=False)


def test_spelling_data_covers_the_vocabulary(tokenizer, sampler):
    spellable = spelling.spellable_tokens(tokenizer)
    assert len(spellable) > 0.8 * (tokenizer.vocab_size - len(tokenizer.special_tokens))
    assert spelling.coverage(tokenizer, sampler) >= 0.98
    for token in random.Random(0).sample(sampler.context_tokens, 200):
        for word in sampler.contexts[token]:  # each practice word really holds its token
            assert token in word_ids(tokenizer, word)
    drawn = Counter(source for _, source in (sampler.draw(random.Random(i)) for i in range(400)))
    assert set(drawn) == set(spelling.WORD_SOURCES)


@pytest.mark.parametrize("pattern", ["gpt4", "spaced"])
def test_every_spellable_token_gets_practice_words_under_either_pre_split(pattern):
    """Under GPT-4's pre-split a word starts with a space-led token; under the course's ``spaced``
    one the space is a token of its own and any letter token can start a word."""
    text = data_path("corpus", "train.txt").read_text(encoding="utf-8")[:60_000]
    tokenizer = Tokenizer.train([text], 700, pattern=pattern)
    spellable = spelling.spellable_tokens(tokenizer)
    starting = spelling.word_start_tokens(tokenizer, spellable)
    assert starting and (starting < set(spellable) if pattern == "gpt4" else starting == set(spellable))
    contexts = spelling.token_contexts(tokenizer)
    assert len(contexts) >= 0.95 * len(spellable)
    for token, words in contexts.items():
        assert all(token in word_ids(tokenizer, word) for word in words)


def test_a_spelling_conversation_spells_letter_by_letter(sampler):
    batch = spelling.spelling_source(sampler, ["cranberry"])(20, "train", 3)
    for conversation in batch:
        word = conversation.expected.facts["word"]
        assert conversation.messages[0]["content"] == f"Spell {word}."
        assert conversation.messages[1]["content"].split(" ") == list(word)
    held_out = spelling.spelling_source(sampler, ["cranberry"])(3, "heldout", 0)
    assert {c.expected.facts["word"] for c in held_out} == {"cranberry"}


def test_heldout_words_never_appear_in_training(sampler, heldout_words):
    every = set(heldout_words["real"]) | set(heldout_words["invented"])
    assert not set(heldout_words["real"]) & set(heldout_words["invented"])
    assert len(heldout_words["real"]) == len(heldout_words["invented"]) == 24
    assert strawberry.SHOWCASE in heldout_words["invented"]
    pattern = re.compile(r"\b(" + "|".join(sorted(every)) + r")\b", re.IGNORECASE)
    questions = strawberry.count_items(sorted(every))
    conversations = spelling.spelling_source(sampler, sorted(every))(300, "train", 1)
    for fmt in strawberry.COUNT_FORMATS:
        conversations += strawberry.format_source(fmt, sampler, questions)(100, "train", 2)
    leaks = [m.group(0) for c in conversations for m in [pattern.search(texts(c))] if m]
    assert not leaks, f"held-out words in the training data: {leaks[:5]}"
    invented_train = [sampler.draw(random.Random(i), "invented")[0] for i in range(200)]
    assert {value_split(w) for w in invented_train} == {"train"}  # a different hash split from the test's


def test_a_sampler_never_draws_an_excluded_word(tokenizer):
    corpus = ["the", "and", "cranberry"]
    sampler = spelling.WordSampler(tokenizer, spelling.token_contexts(tokenizer), corpus, {"The", "cranberry"})
    assert {sampler.draw(random.Random(i), "corpus")[0] for i in range(50)} == {"and"}


def test_formats_share_their_items(sampler, heldout_words):
    questions = strawberry.count_items(heldout_words["real"])
    batches = {fmt: strawberry.format_source(fmt, sampler, questions)(40, "train", 7)
               for fmt in strawberry.COUNT_FORMATS}

    def items(batch):
        return [(c.expected.facts["word"], c.expected.facts.get("letter")) for c in batch]

    assert items(batches["direct"]) == items(batches["spelled"]) == items(batches["tool"])
    kinds = Counter(c.kind for c in batches["spelled"])
    assert 0 < kinds["spell"] < 40  # a share of spelling practice, at the same places in every format
    for conversation in batches["spelled"]:
        if conversation.kind == "strawberry_spelled":
            facts = conversation.expected.facts
            thinking = conversation.messages[1]["content"][0]["thinking"]
            assert strawberry.spelled_letters(thinking) == facts["word"] == facts["word"].lower()


def test_balanced_letters_spread_the_counts():
    rng = random.Random(0)
    counts = Counter("mississippi".count(strawberry.balanced_letter(rng, "mississippi")) for _ in range(3000))
    assert set(counts) == {0, 1, 2, 4}
    for count in (1, 2, 4):  # uniform over the counts the word offers, 0 about one time in ten
        assert 0.25 < counts[count] / 3000 < 0.36
    assert 0.06 < counts[0] / 3000 < 0.14
    questions = strawberry.count_items(["strawberry", "banana"], per_word=2)
    assert len(questions) == 4 and len(set(questions)) == 4


def test_scoring_helpers():
    assert strawberry.answer_count("cranberry has 3 r's.") == 3
    assert strawberry.answer_count("no idea") is None
    assert strawberry.spelled_letters("c r(1) a n b e r(2) r(3) y") == "cranberry"
    assert strawberry.spelled_letters("c r a n\nc r(1) a m") == "cram"  # the line the count was made on
    assert strawberry.spelled_letters("") == ""
    assert strawberry.most_common_answer_share([1, 1, 2, 0]) == 0.5


def test_spelling_first_writes_the_plain_spelling_then_the_count(sampler, heldout_words):
    assert strawberry.counting_steps("berry", "r") == "b e r(1) r(2) y"
    assert strawberry.counting_steps("berry", "r", spell_first=True) == "b e r r y\nb e r(1) r(2) y"
    questions = strawberry.count_items(heldout_words["real"])
    plain = strawberry.format_source("spelled", sampler, questions)(30, "train", 3)
    first = strawberry.format_source("spelled", sampler, questions, spell_first=True)(30, "train", 3)
    assert [c.expected.facts for c in plain] == [c.expected.facts for c in first]  # the same items
    counted = [c for c in first if c.kind == "strawberry_spelled"]
    assert counted
    for conversation in counted:
        facts = conversation.expected.facts
        spelled, steps = conversation.messages[1]["content"][0]["thinking"].split("\n")
        assert spelled == spelling.spell(facts["word"])  # exactly what "Spell X." answers
        assert steps == strawberry.spelled_count(facts["word"], facts["letter"])


def load_build():
    module = load_experiment("strawberry", "build.py")
    return module


def test_a_quick_run_writes_the_results(tmp_path):
    build = load_build()
    out, work = tmp_path / "results.json", tmp_path / "work"
    argv = ["--quick", "--out", str(out), "--work", str(work), "--threads", "1", "--device", "cpu"]
    build.main(argv)
    results = json.loads(out.read_text(encoding="utf-8"))
    assert results["n"] == len(results["items"]["direct"]) > 0
    assert set(results["heldout"]) == {"direct", "spelled", "tool", "spelling_alone"}
    assert set(results["mean_output_tokens"]) == {"direct", "spelled", "tool", "spelling_alone"}
    for value in [results["most_common_answer_baseline"], *results["heldout"].values()]:
        assert 0.0 <= value <= 1.0
    for fmt in strawberry.COUNT_FORMATS:
        for row in results["items"][fmt]:
            assert {"word", "letter", "count", "output", "output_tokens", "correct"} <= set(row)
            assert row["count"] == strawberry.count_letters(row["word"], row["letter"])
            assert row["output_tokens"] > 0
    for stage in ("speller", "speller_polish", *strawberry.COUNT_FORMATS):  # the probe: a point per held-out report
        steps = [point["step"] for point in results["curves"][stage]]
        assert steps[0] == 0 and steps == sorted(steps) and len(steps) >= 3
        assert all(0.0 <= point["accuracy"] <= 1.0 for point in results["curves"][stage])
    assert results["settings"]["polish_steps"] > 0 and set(results["train_seconds"]) == \
        {"speller", "speller_polish", *strawberry.COUNT_FORMATS}
    polish = json.loads((work / "direct" / "sft_config.json").read_text(encoding="utf-8"))["base_model"]
    assert Path(polish) == work / "speller_polish" / "model"  # the formats start from the polished speller
    build.main(argv)  # again: every stage's model is there with the same settings, nothing is retrained
    again = json.loads(out.read_text(encoding="utf-8"))
    assert set(again["train_seconds"].values()) == {0.0}
    assert again["stage_seconds"] == results["stage_seconds"]  # the reused stages' time, read from their logs
    assert set(results["stage_seconds"]) == set(results["train_seconds"])
    assert all(seconds > 0 for seconds in results["stage_seconds"].values())
    assert again["heldout"] == results["heldout"]  # greedy scoring of the same models
    build.main([*argv, "--spell-first"])  # only the spelled format has other data: only it is trained
    spelled_first = json.loads(out.read_text(encoding="utf-8"))
    assert spelled_first["settings"]["spell_first"] is True and "spell_first" not in results["settings"]
    assert spelled_first["train_seconds"]["spelled"] > 0
    assert spelled_first["train_seconds"]["direct"] == spelled_first["train_seconds"]["tool"] == 0.0
    assert (work / "spelled_spell_first" / "model").is_dir() and (work / "spelled" / "model").is_dir()
    assert len(spelled_first["curves"]["spelled"]) >= 3


@pytest.mark.parametrize("name", ["results.json", "results_speller_2500.json", "results_speller_5000.json",
                                  "results_shipped_base.json", "results_format_steps_400.json",
                                  "results_spell_first.json"])
def test_the_committed_results_match_their_items(name):
    """data/experiments/strawberry/results*.json: the keys issue 14 names, every accuracy recomputed from
    the stored items, each item's count the true count, and the baseline from the counts asked."""
    results = json.loads(data_path("experiments", "strawberry", name).read_text(encoding="utf-8"))
    figure = {"spell": "spelling_alone"}
    assert set(results["heldout"]) == {"direct", "spelled", "tool", "spelling_alone"}
    for fmt, items in results["items"].items():
        assert results["heldout"][figure.get(fmt, fmt)] == strawberry.accuracy(items)
        for item in items:
            if fmt != "spell":
                assert item["count"] == strawberry.count_letters(item["word"], item["letter"])
    counts = [item["count"] for item in results["items"]["direct"]]
    assert len(counts) == results["n"]
    assert results["most_common_answer_baseline"] == strawberry.most_common_answer_share(counts)
    assert set(results["mean_output_tokens"]) == set(results["heldout"])
    spelled = results["items"]["spelled"]  # the spelling the count was made on, read again from the thinking
    assert [item["spelled_right"] for item in spelled] == \
           [strawberry.spelled_letters(item["thinking"]) == item["word"] for item in spelled]
    assert results["spelled_the_word_right"] == round(sum(i["spelled_right"] for i in spelled) / len(spelled), 3)


def test_the_full_run_says_how_to_build_its_base_when_it_is_missing(tmp_path, monkeypatch):
    """The full run starts from the recipe's word-copying base; without it, the error names the command."""
    build = load_build()
    monkeypatch.setattr(build, "REPO", tmp_path)  # a checkout where the recipe has not run
    with pytest.raises(SystemExit, match="recipe_words.json --stop-after pretrain_words"):
        build.main(["--out", str(tmp_path / "results.json"), "--work", str(tmp_path / "work")])
    assert build.base_folder("base") == "base"  # a shipped model's name is passed on as it is


def test_started_on_the_word_reads_the_first_spelled_letter():
    assert strawberry.started_on_the_word({"word": "cranberry", "thinking": "c r(1) a n"})
    assert not strawberry.started_on_the_word({"word": "cranberry", "thinking": "s t r(1) a n"})


def test_stage_seconds_take_each_stage_at_its_usual_pace():
    """A paused stage logs one slow line; the time reported is the median pace times the steps."""
    build = load_build()
    logs = {"speller": [{"kind": "eval", "step": 0}, {"kind": "train", "step": 10, "seconds": 5.0},
                        {"kind": "train", "step": 20, "seconds": 5.0}, {"kind": "train", "step": 30, "seconds": 500.0}],
            "direct": []}
    assert build.stage_seconds(logs) == {"speller": 15.0, "direct": 0.0}


def test_the_main_results_meet_the_issue_targets():
    """results.json is the run the course quotes: the speller spells, and spelling out beats answering at once."""
    results = json.loads(data_path("experiments", "strawberry", "results.json").read_text(encoding="utf-8"))
    heldout = results["heldout"]
    assert heldout["spelling_alone"] >= 0.9
    assert heldout["spelled"] >= 0.8 and heldout["spelled"] - heldout["direct"] >= 0.25
    defaults = load_build().FULL  # what build.py runs with no options is what was measured
    assert all(results["settings"][key] == defaults[key] for key in ("steps", "polish_steps", "format_steps"))
    assert set(results["stage_seconds"]) == {"speller", "speller_polish", *strawberry.COUNT_FORMATS}


def test_where_the_input_was_right_counts_answers_on_a_right_input():
    right, wrong = {"spelled_right": True, "called_tool_right": True}, {"spelled_right": False, "called_tool_right": False}
    results = {"items": {"spelled": [{**right, "correct": True}, {**right, "correct": False}, {**wrong, "correct": True}],
                         "tool": [{**right, "correct": True}, {**wrong, "correct": False}]}}
    assert strawberry.where_the_input_was_right(results) == {"spelled_right": 2, "counted_right_on_it": 1,
                                                             "exact_calls": 1, "answered_right_on_them": 1}
