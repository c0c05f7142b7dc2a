"""llmkit.chat.value_copy: the spans a string argument may be copied from, where a value starts, and
that under ``constrain_tools="copy"`` every string argument the model writes is one of them (or one
of its parameter's ``enum`` options), chosen whole."""
from __future__ import annotations

import json

import pytest
import torch

from llmkit.chat.client import Client
from llmkit.chat.constrained import ToolCallConstraint
from llmkit.chat.markers import marker_ids
from llmkit.chat.tools import tool
from llmkit.chat.value_copy import ValueChoice, sources, spans, value_start
from llmkit.model.transformer import ModelConfig, Transformer
from scripted_model import ScriptedModel

pytestmark = pytest.mark.usefixtures("one_thread")


def test_spans_keep_brackets_and_offer_words_without_their_punctuation():
    found = spans(["Solve (38 + 15) * 35.", "WELL, TALLY UP THE a'S WITHIN satellite."])
    assert "(38 + 15) * 35" in found and "satellite" in found and "satellite." in found
    assert "a" in found  # a possessive's word alone: how letters are asked about
    assert "WELL" in found and "TALLY UP" in found
    assert found.index("satellite") < found.index("(38 + 15) * 35")  # the latest text first


def test_spans_are_bounded_in_length_and_number():
    words = [f"w{i}" for i in range(100)]
    found = spans([" ".join(words)], longest=3, most=50)
    assert len(found) == 50
    assert all(len(span.split()) <= 3 for span in found)
    assert len(spans([" ".join(words)], longest=3, most=10_000)) == 100 + 99 + 98


def test_sources_are_the_users_words_and_the_tools_results():
    messages = [{"role": "user", "content": "Weather in Pune?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": json.dumps({"sky": "grey rain", "temp": {"c": 21}})},
                                             {"type": "text", "text": "And Oslo?"}]},
                {"role": "assistant", "content": "It rains in Pune."}]
    assert sources(messages) == ["Weather in Pune?", "grey rain", "21", "And Oslo?"]


@pytest.mark.parametrize("call, where", [
    (b'{"name": "get_weather", "input": {"city":', ("get_weather", "city")),
    (b'{"name": "get_weather", "input": {"city": "Pune", "day":', ("get_weather", "day")),
    (b'{"name": "get_weather", "input": {"city": "', None),  # the value has begun
    (b'{"name": "get_weather", "input": {"ci', None),  # inside a key
    (b'{"name": "get_weather", "input": {"city": "x\\", \\"day\\":', None),  # quotes escaped in a value
    (b'{"name": "get_weather", "input": {"city": "x, \\"day\\": \\"", "n":', ("get_weather", "n")),
    (b'{"name": "get_weather", "input": {"n": 3, "city":', ("get_weather", "city")),
])
def test_value_start_finds_where_a_top_level_value_comes_next(call, where):
    assert value_start(call) == where


LOOKUP = {"name": "look_up", "description": "Look a word up.",
          "input_schema": {"type": "object", "required": ["word", "mode"],
                           "properties": {"word": {"type": "string"},
                                          "mode": {"type": "string", "enum": ["fast", "slow"]}}}}


def test_options_are_the_tokens_a_whole_call_has(tokenizer):
    constraint = ToolCallConstraint(tokenizer, [LOOKUP], copy_from=["Look up satellite, fast please."])
    choice = constraint.values
    call = b'{"name": "look_up", "input": {"word":'
    state = constraint.grammar.matcher.read(call)
    options = choice.options(call, state, constraint.grammar)
    whole = tokenizer.encode('{"name": "look_up", "input": {"word": "satellite", "mode": "fast"}}')
    opened = tokenizer.encode(call.decode())
    assert whole[:len(opened)] == opened
    value = next(whole[len(opened):end] for end in range(len(opened) + 1, len(whole))
                 if tokenizer.decode(whole[len(opened):end]) == ' "satellite",')
    assert value in options  # the value and its closing '",' as one option, in the whole call's tokens
    assert all(tokenizer.decode(option).endswith('",') for option in options)  # "mode" is required: no '"}'
    at_mode = call + b' "satellite", "mode":'
    modes = choice.options(at_mode, constraint.grammar.matcher.read(at_mode), constraint.grammar)
    assert sorted(tokenizer.decode(option) for option in modes) == [' "fast"}', ' "slow"}']  # the enum's options


def _calling_client(tokenizer, messages, tools) -> Client:
    """A random model scripted to open a tool call right after the prompt, then write what it likes."""
    probe = Client.from_model(Transformer(_config(tokenizer)).eval(), tokenizer)
    prompt = probe.messages.render(messages=messages, tools=tools).ids
    torch.manual_seed(0)
    model = ScriptedModel(_config(tokenizer), [marker_ids(tokenizer)["tool_call"]], len(prompt)).eval()
    return Client.from_model(model, tokenizer)


def _config(tokenizer) -> ModelConfig:
    return ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=512, d_model=32, n_layers=2, n_heads=4)


def test_copy_mode_only_writes_values_from_the_conversation(tokenizer):
    """A random model writes whatever it likes; under "copy" each string it puts in a call was said."""

    @tool
    def find_place(place: str, note: str) -> str:
        """Find a place on the map.

        Args:
            place: where to look.
            note: what to look for there.
        """
        return place

    messages = [{"role": "user", "content": "Where is Tromso, near the old harbour?"}]
    client = _calling_client(tokenizer, messages, [find_place])
    said = set(spans([messages[0]["content"]]))
    calls = 0
    for seed in range(8):
        for mode in ("copy", True):
            reply = client.messages.create(messages=messages, tools=[find_place], max_tokens=60, temperature=1.0,
                                           seed=seed, constrain_tools=mode)
            for call in (c for c in reply.tool_calls if "error" not in c):  # not cut off by max_tokens
                copied = call["input"]["place"] in said and call["input"]["note"] in said
                calls += mode == "copy"
                assert copied or mode is True
    assert calls >= 4  # the check above ran


def test_copy_mode_is_checked(tokenizer):
    client = Client.from_model(Transformer(_config(tokenizer)).eval(), tokenizer)
    with pytest.raises(TypeError, match="copy"):
        client.messages.create(messages=[{"role": "user", "content": "hi"}], tools=[LOOKUP], max_tokens=4,
                               constrain_tools="spans")


def test_numbers_and_booleans_are_chosen_among_their_own_candidates(tokenizer):
    counter = {"name": "count", "description": "Count.",
               "input_schema": {"type": "object", "required": ["n", "x", "ok"],
                                "properties": {"n": {"type": "integer"}, "x": {"type": "number"},
                                               "ok": {"type": "boolean"}}}}
    choice = ValueChoice(tokenizer, [counter], ["Add 3 to 2.5, not 007 or v2", "the result is 41"])
    assert choice.numbers == [41, 3, 2.5]  # the latest text first; "007" would not come back as written
    grammar = ToolCallConstraint(tokenizer, [counter]).grammar

    def offered(call: bytes) -> list[str]:
        return sorted(tokenizer.decode(o) for o in choice.options(call, grammar.matcher.read(call), grammar))

    assert offered(b'{"name": "count", "input": {"n":') == [" 3,", " 41,"]
    assert offered(b'{"name": "count", "input": {"n": 3, "x":') == [" 2.5,", " 3,", " 41,"]
    assert offered(b'{"name": "count", "input": {"n": 3, "x": 2.5, "ok":') == [" false}", " true}"]
