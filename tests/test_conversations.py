"""llmkit.course.conversations: seeded, reproducible, held-out-disjoint dialogues that fit the 256-token context."""
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from llmkit.course import conversations as conv
from llmkit.course import conversation_data as data
from llmkit.course import preferences as prefs
from llmkit.course import strawberry as straw
from llmkit.chat.markers import MARKERS
from llmkit.chat.parse import parse_assistant
from llmkit.model.weights import read_config
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.chat.tools import run_tool_call, tools_by_name, validate_arguments
from llmkit.course.tools import EXAMPLE_TOOLS

CONTEXT = read_config(data_path("models", "chat")).context_length  # the course model's context length
TOOLS = tools_by_name(EXAMPLE_TOOLS)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load(data_path("models", "base", "tokenizer.json"))


@pytest.fixture(scope="module")
def sample():
    """A few hundred conversations of every kind from both splits."""
    return [c for split in data.SPLITS for c in conv.make_conversations(300, split=split, seed=3)]


def strawberry_sets():
    return [c for split in data.SPLITS for fmt in straw.STRAWBERRY_FORMATS
            for c in straw.strawberry_tasks(fmt, split=split)]


def fingerprint(items) -> str:
    return hashlib.sha256(json.dumps([repr(item) for item in items]).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- determinism
def test_same_seed_same_data_across_processes():
    code = ("import hashlib, json; from llmkit.course import conversations as c, preferences as p, strawberry as s; "
            "items = c.make_conversations(60, split='heldout', seed=5) + p.make_preferences(20, seed=5) "
            "+ s.strawberry_tasks('spelled', n=10, seed=5); "
            "print(hashlib.sha256(json.dumps([repr(i) for i in items]).encode()).hexdigest())")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    here = conv.make_conversations(60, split="heldout", seed=5) + prefs.make_preferences(20, seed=5) \
        + straw.strawberry_tasks("spelled", n=10, seed=5)
    assert outputs == {fingerprint(here)}


def test_seeds_and_kinds_change_the_data():
    assert fingerprint(conv.make_conversations(30, seed=0)) != fingerprint(conv.make_conversations(30, seed=1))
    kinds = [c.kind for c in conv.make_conversations(12)]
    assert kinds == list(conv.KINDS) * 2
    assert {c.kind for c in conv.make_conversations(5, kinds=["memory"])} == {"memory"}
    assert conv.make_conversations(0) == []


# ---------------------------------------------------------------------------------------------- held-out values
def test_train_and_heldout_values_are_disjoint(sample):
    assert not set(data.CITIES["train"]) & set(data.CITIES["heldout"])
    assert not set(data.NAMES["train"]) & set(data.NAMES["heldout"])
    assert not set(data.words("train")) & set(data.words("heldout"))
    assert not set(data.numbers("train")) & set(data.numbers("heldout"))
    assert "ungarbarrylirryburirira" in data.words("heldout")
    used = {split: {"city": set(), "name": set(), "word": set(), "number": set()} for split in data.SPLITS}
    for c in sample + strawberry_sets():
        facts = c.expected.facts
        for key in ("city", "name", "word"):
            if key in facts:
                used[c.split][key].add(facts[key])
        used[c.split]["number"].update(facts.get("operands", []))
    for key, values in used["train"].items():
        assert values, key
        assert not values & used["heldout"][key], key
    assert used["heldout"]["city"] <= set(data.CITIES["heldout"])


# ---------------------------------------------------------------------------------------------- budget
def test_every_conversation_fits_the_context(tok, sample):
    lengths = {}
    for c in sample + strawberry_sets():
        lengths.setdefault(c.kind, []).append(len(c.render(tok)))
    for kind, values in lengths.items():
        assert max(values) <= CONTEXT, (kind, max(values))
    assert set(lengths) >= set(conv.KINDS)


def test_every_weather_conversation_fits(tok):
    """Weather is the tightest kind (its tool result is ~77 tokens): check every combination."""
    longest = 0
    for split in data.SPLITS:
        for city in data.CITIES[split]:
            for day in ("today", "tomorrow"):
                for question in data.WEATHER_QUESTIONS:
                    for thinking in data.WEATHER_THINKING:
                        c = conv.weather_conversation(city, day, question=question, thinking=thinking, split=split)
                        longest = max(longest, len(c.render(tok)))
    assert longest <= CONTEXT


def test_preferences_fit_the_context(tok):
    for split in data.SPLITS:
        for pair in prefs.make_preferences(100, split=split, seed=2):
            ids = pair.render(tok)
            assert len(ids["prompt"]) + max(len(ids["chosen"]), len(ids["rejected"])) <= CONTEXT


# ---------------------------------------------------------------------------------------------- correctness
def tool_calls(c):
    return [b for m in c.messages if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "tool_use"]


def final_text(message):
    content = message["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content if b["type"] == "text")


def test_tool_calls_are_valid_and_answers_use_the_results(sample):
    seen = set()
    for c in sample:
        calls = tool_calls(c)
        answer = final_text(c.messages[-1])
        if c.expected.tool is None:
            assert not calls
        else:
            (call,) = calls
            assert call["name"] == c.expected.tool and call["input"] == c.expected.tool_input
            assert call["name"] in [t["name"] for t in c.tools]  # only offered tools are called
            validate_arguments(TOOLS[call["name"]], call["input"])
            (result,) = c.messages[2]["content"]
            assert result == run_tool_call(EXAMPLE_TOOLS, call["name"], call["input"], tool_use_id=call["id"])
            numbers_in_result = re.findall(r"-?\d+(?:\.\d+)?", result["content"])
            assert any(n in answer for n in numbers_in_result)
        for value in c.expected.answer_values:
            assert value in answer, (c.kind, value, answer)
        if c.expected.no_invention:
            assert not re.search(r"\d", answer) and "can't know" in answer
        if c.kind == "weather":
            chance = c.expected.facts["forecast"]["chance_of_rain_percent"]
            assert c.expected.facts["umbrella"] == (chance >= data.UMBRELLA_FROM_PERCENT)
            if "umbrella" in answer:
                assert answer.startswith("Yes, take an umbrella") == c.expected.facts["umbrella"]
        seen.add(c.kind)
    assert seen == set(conv.KINDS)


def test_memory_needs_the_history(sample):
    for c in sample:
        if c.kind != "memory":
            continue
        name = c.expected.facts["name"]
        assert name in c.messages[0]["content"]
        assert name not in c.prompt[-1]["content"]  # the last question doesn't say it: only history does
        assert c.prompt == c.messages[:-1]


def test_prompt_ends_at_the_users_last_question(sample):
    for c in sample:
        assert c.prompt[-1]["role"] == "user" and isinstance(c.prompt[-1]["content"], str)
        if c.expected.tool:
            assert c.prompt == c.messages[:1]


# ---------------------------------------------------------------------------------------------- template
def expected_assistant_text(message) -> str:
    """What the assistant writes for one message, spelled out from the layout's rules."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    out = ""
    for b in blocks:
        if b["type"] == "thinking":
            out += f"{MARKERS['thinking']}{b['thinking']}{MARKERS['end_thinking']}"
        elif b["type"] == "text":
            out += b["text"]
        else:
            body = json.dumps({"name": b["name"], "input": b["input"]}, ensure_ascii=False)
            out += f"{MARKERS['tool_call']}{body}{MARKERS['end_tool_call']}"
    return out + ("" if blocks[-1]["type"] == "tool_use" else MARKERS["end_turn"])


def masked_runs(rendered):
    """The ids of each stretch the loss mask covers (``Rendered.assistant_spans``)."""
    return [rendered.ids[start:end] for start, end in rendered.assistant_spans()]


def test_loss_mask_is_exactly_the_assistant_turns(tok, sample):
    for c in sample[::3] + strawberry_sets()[::5]:
        runs = masked_runs(c.render(tok))
        assistant = [m for m in c.messages if m["role"] == "assistant"]
        assert [tok.decode(run) for run in runs] == [expected_assistant_text(m) for m in assistant]


def test_render_then_parse_recovers_the_blocks(tok, sample):
    for c in sample[::3] + strawberry_sets()[::5]:
        runs = masked_runs(c.render(tok))
        for run, message in zip(runs, [m for m in c.messages if m["role"] == "assistant"]):
            content = message["content"]
            original = [{"type": "text", "text": content}] if isinstance(content, str) else content
            parsed = parse_assistant(tok, run, tool_use_id="toolu_0")
            assert parsed == original


# ---------------------------------------------------------------------------------------------- DPO
def test_preferences_prefer_tools_and_honesty(tok):
    pairs = prefs.make_preferences(50, split="heldout", seed=1)
    assert {p.kind for p in pairs} == set(prefs.PREFERENCE_KINDS)
    for p in pairs:
        assert p.chosen != p.rejected
        assert p.prompt[-1]["role"] == "user"
        rejected = final_text(p.rejected)
        if p.kind in ("weather", "letters", "arithmetic"):
            assert [b["type"] for b in p.chosen["content"]] == ["thinking", "tool_use"]
            assert re.search(r"\d", rejected)  # answered at once, with a guessed number
        if p.kind == "no_tool":
            assert not re.search(r"\d", final_text(p.chosen)) and re.search(r"\d", rejected)
        if p.kind == "memory":
            assert final_text(p.chosen) != rejected and rejected.startswith("Your name is")
        ids = p.render(tok)
        assert ids["chosen"] != ids["rejected"] and ids["chosen"][0] != tok.special_tokens["<|assistant|>"]
    with pytest.raises(ValueError, match="direct"):
        prefs.make_preferences(2, kinds=["direct"])


# ---------------------------------------------------------------------------------------------- strawberry
def test_strawberry_formats_share_their_items():
    sets = {fmt: straw.strawberry_tasks(fmt, split="heldout", seed=4) for fmt in straw.STRAWBERRY_FORMATS}
    items = {fmt: [(c.expected.facts["word"], c.expected.facts["letter"]) for c in cs] for fmt, cs in sets.items()}
    assert items["direct"] == items["spelled"] == items["tool"] == items["spell"]
    assert [w for w, _ in items["direct"]] == data.words("heldout")
    for c in sets["spelled"]:
        facts = c.expected.facts
        thinking = c.messages[1]["content"][0]["thinking"]
        counts = [int(n) for n in re.findall(r"\((\d+)\)", thinking)]
        assert counts == list(range(1, facts["count"] + 1))
        assert re.sub(r"\(\d+\)", "", thinking).split() == list(facts["word"])
    for c in sets["spell"]:
        assert c.messages[0]["content"] == f"Spell {c.expected.facts['word']}."
        assert c.messages[1]["content"] == " ".join(c.expected.facts["word"])
    for c in sets["tool"]:
        assert [t["name"] for t in c.tools] == ["count_letters"] and c.expected.tool == "count_letters"
    for c in sets["direct"]:
        assert c.tools is None and str(c.expected.facts["count"]) in c.messages[1]["content"]


def test_spelled_count_of_strawberry():
    assert straw.spelled_count("strawberry", "r") == "s t r(1) a w b e r(2) r(3) y"
    assert straw.strawberry_tasks("direct", split="train", n=7, seed=0) == \
           straw.strawberry_tasks("direct", split="train", n=7, seed=0)


# ---------------------------------------------------------------------------------------------- errors
def test_clear_errors():
    with pytest.raises(ValueError, match="split"):
        conv.make_conversations(1, split="test")
    with pytest.raises(ValueError, match="kinds"):
        conv.make_conversations(1, kinds=["poetry"])
    with pytest.raises(ValueError, match="n must be"):
        conv.make_conversations(-1)
    with pytest.raises(ValueError, match="fmt"):
        straw.strawberry_tasks("guess")
    with pytest.raises(ValueError, match="WEATHER_QUESTIONS"):
        conv.weather_conversation("Pune", question="Rain?")
