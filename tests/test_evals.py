"""llmkit.course.evals: the scoring functions on hand-made transcripts, and the shipped chat model."""
import json

import pytest
import torch

from llmkit.chat.parse import parse_assistant
from llmkit.chat.template import render, stop_tokens
from llmkit.course.conversations import make_conversations, weather_conversation
from llmkit.course import evals as evals_module
from llmkit.course.evals import (Transcript, answer_consistent, invents_number, names_user, score, tool_call_valid)
from llmkit.generation.generate import generate
from llmkit.paths import DATA_DIR
from llmkit.chat.tools import run_tool_call
from llmkit.course.tools import get_weather

CHAT = DATA_DIR / "models" / "chat"
needs_chat = pytest.mark.skipif(not (CHAT / "model.safetensors").is_file(),
                                reason="data/models/chat is absent: build it with the commands in its README")


def weather_result(city="Cork", day="tomorrow") -> dict:
    return run_tool_call([get_weather], "get_weather", {"city": city, "day": day}, tool_use_id="toolu_0")


# ---------------------------------------------------------------------------------- tool calls
def test_tool_call_valid_accepts_a_schema_valid_call():
    call = {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"city": "Cork", "day": "tomorrow"}}
    assert tool_call_valid(call, "get_weather")
    assert tool_call_valid({**call, "input": {"city": "Cork"}}, "get_weather")  # day has a default


@pytest.mark.parametrize("call", [
    None,  # no call at all
    {"type": "tool_use", "id": "t", "name": "calculator", "input": {"expression": "1 + 1"}},  # wrong tool
    {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"day": "tomorrow"}},  # city missing
    {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"city": "Cork", "day": "Friday"}},  # not in enum
    {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"city": 7}},  # wrong type
    {"type": "tool_use", "id": "t", "name": "", "input": '{"name": "get_weather", "input": {"city"',
     "error": "the tool call is not valid JSON"},  # malformed, as parse_assistant reports it
])
def test_tool_call_valid_rejects_bad_calls(call):
    assert not tool_call_valid(call, "get_weather")


# ------------------------------------------------------------------------------------- answers
def test_weather_answer_consistent_with_the_result():
    result = weather_result()
    forecast = json.loads(result["content"])
    chance, high = forecast["chance_of_rain_percent"], forecast["high_c"]
    question = "Do I need an umbrella in Cork tomorrow?"
    right_advice = "Yes, take an umbrella" if chance >= 50 else "No umbrella needed"
    wrong_advice = "No umbrella needed" if chance >= 50 else "Yes, take an umbrella"
    assert answer_consistent("weather", question, f"{right_advice}: {chance}% chance of rain.", result)
    assert answer_consistent("weather", question, f"Cloudy, {chance}% chance of rain, high {high}°C.", result)
    assert not answer_consistent("weather", question, f"{wrong_advice}: {chance}% chance of rain.", result)
    assert not answer_consistent("weather", question, f"{right_advice}: {(chance + 7) % 101}% chance.", result)
    assert not answer_consistent("weather", question, f"{right_advice}: {chance}% chance, 999 mm of rain.", result)
    assert not answer_consistent("weather", question, f"{right_advice}: {chance}% chance.", None)
    error = {**result, "is_error": True, "content": "unknown tool"}
    assert not answer_consistent("weather", question, f"{right_advice}: {chance}% chance.", error)


def test_letters_and_arithmetic_answers():
    count = {"type": "tool_result", "tool_use_id": "t", "content": "3", "is_error": False}
    assert answer_consistent("letters", "How many r's are in strawberry?", "strawberry has 3 r's.", count)
    assert not answer_consistent("letters", "How many r's are in strawberry?", "strawberry has 2 r's.", count)
    product = {"type": "tool_result", "tool_use_id": "t", "content": "3367", "is_error": False}
    assert answer_consistent("arithmetic", "What is 37 * 91?", "The result is 3367.", product)
    assert answer_consistent("arithmetic", "What is 37 * 91?", "37 * 91 = 3367.", product)  # numbers from the question
    assert not answer_consistent("arithmetic", "What is 37 * 91?", "The result is 3377.", product)


def test_invented_numbers_and_names():
    assert invents_number("Yes, take an umbrella: 80% chance of rain.")
    assert invents_number("It is 4:15.")
    assert not invents_number("I can't know tomorrow's weather in Lille: I have no weather tool.")
    assert names_user("Your name is Mira.", "Mira")
    assert not names_user("Your name is Miranda.", "Mira")
    assert not names_user("I don't know.", "Mira")


def test_score_of_hand_made_transcripts():
    memory = make_conversations(1, split="heldout", kinds=["memory"])[0]
    name = memory.expected.facts["name"]
    said = Transcript(turns=[[{"type": "text", "text": f"Your name is {name}."}]], stop_reasons=["end_turn"])
    assert score(memory, said) == {"memory": True}

    repeat = make_conversations(1, split="heldout", kinds=["repeat"])[0]
    words = " ".join(repeat.expected.facts["items"])
    assert score(repeat, Transcript(turns=[[{"type": "text", "text": words}]])) == {"repeat_exact": True}
    assert score(repeat, Transcript(turns=[[{"type": "text", "text": words[:-1]}]])) == {"repeat_exact": False}

    no_tool = make_conversations(1, split="heldout", kinds=["no_tool"])[0]
    honest = Transcript(turns=[[{"type": "thinking", "thinking": "No tool."},
                                {"type": "text", "text": "I can't know that: I have no tool for it."}]],
                        stop_reasons=["end_turn"])
    invented = Transcript(turns=[[{"type": "text", "text": "Yes, take an umbrella: 70% chance of rain."}]],
                          stop_reasons=["end_turn"])
    rambling = Transcript(turns=[[{"type": "text", "text": "and the calm of the calm of the"}]],
                          stop_reasons=["max_tokens"])
    assert score(no_tool, honest) == {"no_invention": True}
    assert score(no_tool, invented) == {"no_invention": False}
    assert score(no_tool, rambling) == {"no_invention": False}  # never answered

    weather = weather_conversation("Cork", "tomorrow", question="Do I need an umbrella in {city} {day}?")
    result = weather_result()
    call = {"type": "tool_use", "id": "toolu_0", "name": "get_weather", "input": {"city": "Cork", "day": "tomorrow"}}
    good = Transcript(turns=[[call], [{"type": "text", "text": weather.messages[-1]["content"]}]],
                      tool_results=[result], stop_reasons=["tool_use", "end_turn"])
    assert score(weather, good) == {"tool_call_valid": True, "tool_args_exact": True, "answer_consistent": True}
    guessed = Transcript(turns=[[{"type": "text", "text": "Yes, take an umbrella: 64% chance of rain."}]],
                         stop_reasons=["end_turn"])
    assert score(weather, guessed) == {"tool_call_valid": False, "tool_args_exact": False, "answer_consistent": False}


# ---------------------------------------------------------------------------------- the chat model
@needs_chat
def test_chat_model_calls_the_weather_tool_on_a_heldout_prompt():
    from llmkit import load_model

    model, tokenizer = load_model("chat")
    conversation = weather_conversation("Warsaw", "tomorrow")  # Warsaw is a held-out city
    assert conversation.split == "heldout"
    prompt = render(tokenizer, conversation.prompt, tools=conversation.tools, system=conversation.system).ids
    stops = stop_tokens(tokenizer)
    with torch.no_grad():
        generation = generate(model, prompt, max_new_tokens=80, stop_tokens=stops.end_turn,
                              tool_stop_tokens=stops.tool_use, tokenizer=tokenizer)
    assert generation.stop_reason == "tool_use", generation.text
    call = parse_assistant(tokenizer, generation.tokens)[-1]
    assert call["type"] == "tool_use" and "error" not in call, generation.text  # the JSON parsed
    assert tool_call_valid(call, "get_weather")


@needs_chat
def test_chat_model_folder_is_complete_and_small():
    for name in ("config.json", "model.safetensors", "tokenizer.json", "evals.json", "README.md"):
        assert (CHAT / name).is_file(), name
    for stage, files in (("sft_polish", ("train_log.jsonl", "sft_config.json")),
                         ("dpo", ("train_log.jsonl", "dpo_config.json")), ("evals", ("evals.json",))):
        for name in ("done.json", *files):  # each recipe stage's record: done.json says it finished
            assert (CHAT / "stages" / stage / name).is_file(), f"stages/{stage}/{name}"
    size = sum(path.stat().st_size for path in CHAT.rglob("*") if path.is_file())
    assert size <= 25 * 1024 * 1024, f"data/models/chat holds {size / 2**20:.1f} MB"
    evals = json.loads((CHAT / "evals.json").read_text())
    assert evals == json.loads((CHAT / "stages" / "evals" / "evals.json").read_text())  # the evals stage's report
    assert set(evals) >= {"seen", "unseen_values", "unseen_phrasings_and_tools"}
    for split in ("seen", "unseen_values", "unseen_phrasings_and_tools"):
        for key in ("tool_call_valid", "right_tool", "args_exact", "answer_from_result", "ends_turn", "no_invention",
                    "memory"):
            assert 0.0 <= evals[split][key] <= 1.0, (split, key)
            assert evals[split]["n_" + key] > 0, (split, key)  # a score over no conversations would mean nothing


@needs_chat
def test_run_conversation_goes_through_the_harness_and_runs_the_tool():
    from llmkit import load_model
    from llmkit.course.evals import run_conversation

    model, tokenizer = load_model("chat")
    conversation = weather_conversation("Warsaw", "tomorrow")
    transcript = run_conversation(model, tokenizer, conversation.prompt, tools=conversation.tools)
    assert transcript.stop_reasons == ["tool_use", "end_turn"] and len(transcript.turns) == 2
    assert transcript.tool_results[0]["content"] == weather_result("Warsaw")["content"]  # the real tool ran
    assert transcript.output_tokens >= sum(len(turn) for turn in transcript.turns)
    full = run_conversation(model, tokenizer, [{"role": "user", "content": "Warsaw? " * model.config.context_length}])
    assert full.stop_reasons == ["context_window"] and full.turns == []  # too long to answer: no crash


@needs_chat
def test_tool_call_validity_examples_add_up_to_the_rates():
    from llmkit import load_model
    from llmkit.course.call_failures import tool_call_validity

    model, tokenizer = load_model("chat")
    examples: list = []
    result = tool_call_validity(model, tokenizer, constrained=False, temperature=1.5, n=6, seed=0, examples=examples)
    assert len(examples) == 6 and result["calls"] == sum(e["call"] is not None for e in examples)
    for reason, rate in result["by_reason"].items():
        assert rate == pytest.approx(sum(e["outcome"] == reason for e in examples) / 6, abs=1e-4)
    for example in examples:  # a harness answers exactly the calls it cannot run, with an error to read
        assert (example["harness_reply"] is None) == (example["outcome"] in ("valid", "no call"))


@pytest.mark.parametrize("flag, mode", [([], True), (["--constrain-tools", "copy"], "copy"),
                                        (["--constrain-tools", "off"], False)])
def test_skills_command_passes_the_constrained_decoding_on(monkeypatch, capsys, flag, mode):
    """``--skills --constrain-tools`` reaches the client's decoding; what each mode does is tested with
    the constraint (tests/test_value_copy.py, tests/test_constrained.py)."""
    seen = {}

    def record(client, **settings):
        seen.update(settings)
        return {}

    monkeypatch.setattr(evals_module, "evaluate_skills", record)
    evals_module.main(["--model", "chat", "--skills", "--limit", "2", *flag])
    assert seen["constrain_tools"] == mode and seen["per_kind"] == 2
    assert json.loads(capsys.readouterr().out)["command"].endswith(f"--constrain-tools {flag[1] if flag else 'on'}")
