"""llmkit.chat.constrained: the automaton accepts exactly the canonical calls, its token masks agree with
a brute-force check, and under the constraint even a random model writes calls that parse and
validate; the client turns it on by default."""
from __future__ import annotations

import functools
import json
from typing import Literal

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmkit.chat.client import Client
from llmkit.chat.constrained import CallGrammar, ToolCallConstraint, call_matcher
from llmkit.chat.markers import marker_ids
from llmkit.chat.parse import parse_assistant
from llmkit.chat.template import render, stop_tokens
from llmkit.chat.tool_signature import tool_definitions
from llmkit.generation.json_automaton import UnsupportedSchemaError, value_matcher
from llmkit.generation.generate import generate
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.generation.sampling import SamplingParams, TokenConstraint
from llmkit.chat.tools import ToolArgumentsError, parse_arguments, tool, tools_by_name, validate_arguments
from llmkit.course.tools import EXAMPLE_TOOLS, get_weather
from scripted_model import ScriptedModel

pytestmark = pytest.mark.usefixtures("one_thread")


@tool
def set_alarm(hour: int, minute: int = 0, days: list[Literal["mon", "tue", "sat"]] | None = None,
              loud: bool = False, priority: Literal[1, 2, 12] = 1, tags: list[int] | None = None) -> str:
    """Set an alarm.

    Args:
        hour: Hour of the day.
        minute: Minute of the hour.
        days: Days it rings on.
        loud: Ring loudly.
        priority: How urgent.
        tags: Numbers to file it under.
    """
    return "set"


@tool
def scale(factor: float, label: str = "") -> str:
    """Scale something.

    Args:
        factor: By how much.
        label: A name for it.
    """
    return "scaled"


TOOLS = [*EXAMPLE_TOOLS, set_alarm]  # every schema feature but "number"
BY_NAME = tools_by_name(TOOLS + [scale])


def canonical(name: str, arguments: dict) -> bytes:
    """A call exactly as the chat template writes it."""
    return json.dumps({"name": name, "input": arguments}, ensure_ascii=False).encode()


def is_valid_call(data: bytes, tools: list, *, exact: bool = True) -> bool:
    """The oracle: strict UTF-8 and JSON (no repeated keys), ``{"name", "input"}`` in that order, an
    offered tool, arguments that validate and, with ``exact``, written the canonical way."""
    try:
        text = data.decode("utf-8")
        call = json.loads(text, object_pairs_hook=_no_repeats)
    except ValueError:
        return False
    if not isinstance(call, dict) or list(call) != ["name", "input"] or not isinstance(call["input"], dict):
        return False
    by_name = tools_by_name(tools)
    if call["name"] not in by_name:
        return False
    try:
        validate_arguments(by_name[call["name"]], call["input"])
    except ToolArgumentsError:
        return False
    return not exact or json.dumps(call, ensure_ascii=False) == text


def _no_repeats(pairs):
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ValueError("repeated key")
    return dict(pairs)


# ------------------------------------------------------------------------------ the automaton
def arguments_for(schema: dict) -> st.SearchStrategy:
    """Valid arguments for an object schema, optional keys sometimes left out, keys in any order."""
    properties, required = schema["properties"], set(schema["required"])
    values = {key: value_for(prop) for key, prop in properties.items()}
    present = st.fixed_dictionaries({key: st.booleans() for key in properties}).map(
        lambda keep: [key for key in properties if key in required or keep[key]])
    return present.flatmap(lambda keys: st.permutations(keys)).flatmap(
        lambda keys: st.fixed_dictionaries({key: values[key] for key in keys}).map(
            lambda chosen: {key: chosen[key] for key in keys}))


def value_for(prop: dict) -> st.SearchStrategy:
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    kind = prop["type"]
    if kind == "array":
        return st.lists(value_for(prop["items"]), max_size=3)
    return {"string": st.text(max_size=12), "integer": st.integers(), "boolean": st.booleans(),
            "number": st.floats(allow_nan=False, allow_infinity=False) | st.integers()}[kind]


def valid_call(tools) -> st.SearchStrategy:
    return st.sampled_from(tools).flatmap(
        lambda t: arguments_for(t.input_schema).map(lambda arguments: canonical(t.name, arguments)))


def corrupt(data: bytes, draw) -> bytes:
    """Delete, insert, replace or repeat a few bytes."""
    position = draw(st.integers(0, len(data) - 1))
    how = draw(st.sampled_from(["delete", "insert", "replace", "repeat"]))
    if how == "delete":
        return data[:position] + data[position + 1:]
    byte = bytes([draw(st.sampled_from(list(b'"{}[],: \\0123456789-.eatn') + [0x0a, 0x80, 0xc3, 0xff]))])
    if how == "insert":
        return data[:position] + byte + data[position:]
    if how == "replace":
        return data[:position] + byte + data[position + 1:]
    end = draw(st.integers(position + 1, len(data)))
    return data[:end] + data[position:end] + data[end:]


MATCHER = call_matcher(tool_definitions(TOOLS))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_call(TOOLS), st.data())
def test_the_automaton_accepts_exactly_the_canonical_calls(data, draws):
    assert MATCHER.accepts(data), data
    for cut in range(len(data)):  # every prefix can still become a valid call, and is not one yet
        state = MATCHER.read(data[:cut])
        assert state is not None and not MATCHER.done(state)
    for _ in range(3):
        broken = corrupt(data, draws.draw)
        assert MATCHER.accepts(broken) == is_valid_call(broken, TOOLS), broken


@settings(max_examples=200, deadline=None)
@given(valid_call([scale]), st.data())
def test_numbers_are_any_json_number_and_stay_valid(data, draws):
    matcher = call_matcher(tool_definitions([scale]))
    assert matcher.accepts(data), data  # however Python writes a float (1e+16, 5e-324, -0.0) or an int
    broken = corrupt(data, draws.draw)
    if matcher.accepts(broken):  # "1.50" is not how Python writes 1.5, but it is a valid number
        assert is_valid_call(broken, [scale], exact=False), broken


@pytest.mark.parametrize("text, ok", [
    ('{"name": "get_weather", "input": {"city": "Pune"}}', True),
    ('{"name": "get_weather", "input": {"day": "today", "city": "Pune"}}', True),  # any key order
    ('{"name": "get_weather", "input": {"day": "today"}}', False),  # city is required
    ('{"name": "get_weather", "input": {"city": "A", "city": "B"}}', False),  # a repeated key
    ('{"name": "get_weather", "input": {"city": "Pune", "when": "now"}}', False),  # an unknown key
    ('{"name": "get_weather", "input": {"city": "Pune", "day": "Friday"}}', False),  # not in the enum
    ('{"name": "get_time", "input": {}}', False),  # not offered
    ('{"name":"calculator", "input": {"expression": "1"}}', False),  # not the template's spacing
    ('{"name": "calculator", "input": {"expression": "a\\nb"}}', True),
    ('{"name": "calculator", "input": {"expression": "a\\u000ab"}}', False),  # json.dumps writes \\n
    ('{"name": "calculator", "input": {"expression": "\\u001f é 😀"}}', True),
    ('{"name": "set_alarm", "input": {"hour": 7, "priority": 12, "days": ["mon", "sat"], "tags": []}}', True),
    ('{"name": "set_alarm", "input": {"hour": 07}}', False),
    ('{"name": "set_alarm", "input": {"hour": -0}}', False),
    ('{"name": "set_alarm", "input": {"hour": 7.0}}', False),  # an integer, not a float
    ('{"name": "set_alarm", "input": {"hour": 7, "priority": 3}}', False),
    ('{"name": "set_alarm", "input": {"hour": 7, "loud": True}}', False),
    ('{"name": "set_alarm", "input": {"hour": 7, "days": ["mon",]}}', False),
])
def test_hand_picked_calls(text, ok):
    assert MATCHER.accepts(text.encode()) is ok
    assert is_valid_call(text.encode(), TOOLS) is ok


def test_bytes_must_be_well_formed_utf8():
    start = b'{"name": "calculator", "input": {"expression": "'
    for bad in (b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc3("):  # overlong, surrogate, ...
        assert MATCHER.read(start + bad) is None, bad
    assert MATCHER.accepts(start + "é€😀".encode() + b'"}}')


# ------------------------------------------------------------------------------ schemas it refuses
@pytest.mark.parametrize("schema, feature", [
    ({"type": "object", "properties": {"x": {"type": "string", "maxLength": 5}}}, "maxLength"),
    ({"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}}, "minimum"),
    ({"type": "object", "properties": {"x": {"type": ["string", "null"]}}}, "type"),
    ({"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}]}}}, "anyOf"),
    ({"type": "object", "properties": {"x": {"type": "null"}}}, "null"),
    ({"type": "object", "properties": {"x": {"type": "array"}}}, "items"),
    ({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}, "additionalProperties"),
    ({"type": "object", "properties": {}, "required": ["x"]}, r"required key\(s\) \['x'\]"),
    ({"type": "object", "properties": {"x": {"enum": ["a"], "type": "integer"}}}, "no value of its enum"),
    ({"type": "object", "properties": {"x": {"enum": [{"a": 1}], "type": "object"}}}, "enum of type 'object'"),
    ({"type": "object", "properties": {}, "patternProperties": {}}, "patternProperties"),
])
def test_an_unsupported_schema_is_an_error_naming_the_feature(schema, feature):
    definition = {"name": "odd", "description": "An odd tool.", "input_schema": schema}
    with pytest.raises(UnsupportedSchemaError, match=feature):
        call_matcher([definition])


def test_nested_objects_and_annotations_are_fine():
    matcher = value_matcher({"type": "object", "title": "T", "properties": {
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}}}, "x")
    assert matcher.accepts(b'{"where": {"lat": -1.5e3}}') and matcher.accepts(b"{}")
    assert not matcher.accepts(b'{"where": {}}')


# ------------------------------------------------------------------------------ tokens
def test_token_masks_agree_with_checking_every_token(tokenizer):
    grammar = CallGrammar(tokenizer, tool_definitions(TOOLS))
    matcher, end = grammar.matcher, marker_ids(tokenizer)["end_tool_call"]
    whole = b'{"name": "set_alarm", "input": {"hour": 12, "days": ["tue"], "loud": false}}'
    for cut in (0, 3, 10, 22, 33, 40, 44, 52, 58, 60, 70, len(whole) - 1, len(whole)):
        state = matcher.read(whole[:cut])
        expected = torch.zeros(tokenizer.vocab_size, dtype=torch.bool)
        for token in range(tokenizer.vocab_size):
            if token == end:
                expected[token] = matcher.done(state)
            elif token not in grammar.special:
                expected[token] = matcher.read(tokenizer.token_bytes(token), state) is not None
        assert torch.equal(grammar.allowed(state), expected), whole[:cut]
        assert expected.any()  # there is always a way on


def test_the_constraint_follows_text_thinking_and_calls(tokenizer):
    ids = marker_ids(tokenizer)
    constraint = ToolCallConstraint(tokenizer, [get_weather])
    outside = constraint.allowed()  # plain text: anything but a stray <|end_tool_call|>
    assert isinstance(constraint, TokenConstraint) and not outside[ids["end_tool_call"]]
    assert outside.sum() == tokenizer.vocab_size - 1
    for token in tokenizer.encode("Hi <|tool_call|>", disallowed_special=()) + [ids["thinking"], ids["tool_call"]]:
        constraint.advance(token)  # a marker's name in the text, and <|tool_call|> inside thinking, are text
    assert not constraint.in_call and torch.equal(constraint.allowed(), outside)
    constraint.advance(ids["end_thinking"])
    constraint.advance(ids["tool_call"])
    opening = [tokenizer.decode([t]) for t in constraint.allowed().nonzero().flatten().tolist()]
    assert constraint.in_call and opening and all(text.startswith("{") for text in opening)  # only "{" opens the JSON
    with pytest.raises(ValueError, match="cannot continue the tool call"):
        constraint.advance(ids["end_tool_call"])
    for token in tokenizer.encode('{"name": "get_weather", "input": {"city": "Pune"}}'):
        constraint.advance(token)
    assert constraint.allowed()[ids["end_tool_call"]] and constraint.allowed().sum() == 1
    constraint.advance(ids["end_tool_call"])
    assert not constraint.in_call and torch.equal(constraint.allowed(), outside)

    no_tools = ToolCallConstraint(tokenizer, [])
    mask = no_tools.allowed()
    assert not mask[ids["tool_call"]] and not mask[ids["end_tool_call"]] and mask.sum() == tokenizer.vocab_size - 2


# ------------------------------------------------------------------------------ generation
class Contrarian(Transformer):
    """A random model that opens a tool call as soon as it may speak (right after ``<|assistant|>``),
    then leans hard towards JSON punctuation and control tokens: left alone it writes broken calls
    almost every time."""

    def __init__(self, config, tokenizer, lean: float):
        super().__init__(config)
        markers = marker_ids(tokenizer)
        self.assistant, self.tool_call = markers["assistant"], markers["tool_call"]
        self.bias = torch.zeros(config.vocab_size)
        for token in range(config.vocab_size):
            data = tokenizer.token_bytes(token)
            if token in tokenizer.special_tokens.values() or any(c in data for c in b'"{}[],:\\0123456789'):
                self.bias[token] = lean

    def forward(self, ids, cache=None, start_pos=None, *, last_only=False):
        logits = super().forward(ids, cache, start_pos, last_only=last_only) + self.bias
        logits[ids[:, -1] == self.assistant, -1, self.tool_call] += 1e4
        return logits


def sample_calls(model, tokenizer, tools, *, constrained: bool, seeds: range, num_samples: int = 8,
                 choose_names: bool = True):
    """Every sampled turn: (stop reason, the tool_use block or None)."""
    prompt = render(tokenizer, [{"role": "user", "content": "Go."}], tools=tools).ids
    stops = stop_tokens(tokenizer)
    factory = functools.partial(ToolCallConstraint, tokenizer, tools, choose_names=choose_names) if constrained else None
    out = []
    for seed in seeds:
        generation = generate(model, prompt, max_new_tokens=model.config.context_length - len(prompt),
                              sampling=SamplingParams(temperature=1.0), stop_tokens=stops.end_turn,
                              tool_stop_tokens=stops.tool_use, seed=seed, num_samples=num_samples,
                              constraint=factory)
        for sample in generation.samples:
            blocks = parse_assistant(tokenizer, sample.tokens)
            out.append((sample.stop_reason, next((b for b in blocks if b["type"] == "tool_use"), None)))
    return out


def assert_all_valid(results, tools):
    by_name = tools_by_name(tools)
    finished = [call for reason, call in results if reason == "tool_use"]
    for call in finished:
        assert "error" not in call, call
        validate_arguments(by_name[call["name"]], parse_arguments(call["input"]))
    return finished


def contrarian(tokenizer, lean: float) -> Contrarian:
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=32, n_layers=2,
                               n_heads=4)
    torch.manual_seed(0)
    return Contrarian(config, tokenizer, lean).eval()


def test_a_model_that_wants_broken_json_still_writes_valid_calls(tokenizer):
    model = contrarian(tokenizer, lean=6.0)
    free = sample_calls(model, tokenizer, EXAMPLE_TOOLS, constrained=False, seeds=range(2))
    assert sum(call is not None and "error" in call for _, call in free) > len(free) // 2  # the model is hostile
    for choose_names in (True, False):  # the name chosen whole (the default), or token by token
        results = sample_calls(model, tokenizer, EXAMPLE_TOOLS, constrained=True, seeds=range(6),
                               choose_names=choose_names)
        finished = assert_all_valid(results, EXAMPLE_TOOLS)
        assert len(finished) >= len(results) // 2  # most finish inside the context window
        assert {reason for reason, _ in results} <= {"tool_use", "max_tokens"}  # only the budget can cut a call short
    # token by token it still chooses among the valid names; chosen whole, this model (which
    # dislikes letters) gives the name with the fewest letter tokens nearly all the probability
    assert len({call["name"] for call in finished}) >= 2


def test_a_random_model_writes_valid_calls_under_the_constraint(tokenizer, tiny_llama):
    tools = [set_alarm]
    prompt_length = len(render(tokenizer, [{"role": "user", "content": "Go."}], tools=tools).ids)
    base = tiny_llama(tokenizer.vocab_size, context_length=prompt_length + 300)  # random digits run long
    model = ScriptedModel(base.config, [marker_ids(tokenizer)["tool_call"]], prompt_length)
    model.load_state_dict(base.state_dict())  # the fixture's random weights; the script only opens the call
    results = sample_calls(model.eval(), tokenizer, tools, constrained=True, seeds=range(4))
    finished = assert_all_valid(results, tools)
    assert len(finished) >= len(results) // 2
    assert len({json.dumps(call["input"]) for call in finished}) > len(finished) // 2  # it does sample


def test_without_a_tool_call_the_constraint_changes_nothing(tokenizer, tiny_llama):
    model = tiny_llama(tokenizer.vocab_size, context_length=256)
    prompt = render(tokenizer, [{"role": "user", "content": "Hello"}], tools=EXAMPLE_TOOLS).ids
    request = dict(max_new_tokens=40, sampling=SamplingParams(temperature=1.0), seed=3, num_samples=4)
    plain = generate(model, prompt, **request)
    constrained = generate(model, prompt, **request, constraint=functools.partial(ToolCallConstraint, tokenizer,
                                                                                   EXAMPLE_TOOLS))
    assert marker_ids(tokenizer)["tool_call"] not in {t for s in plain.samples for t in s.tokens}
    assert [s.tokens for s in plain.samples] == [s.tokens for s in constrained.samples]


# ------------------------------------------------------------------------------ the client
def tiny_client(tokenizer, script: str, prompt_length: int) -> Client:
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=32, n_layers=2,
                               n_heads=2)
    torch.manual_seed(0)
    model = ScriptedModel(config, tokenizer.encode(script, allowed_special="all"), prompt_length)
    return Client.from_model(model.eval(), tokenizer)


def test_the_client_constrains_tool_calls_by_default(tokenizer):
    messages = [{"role": "user", "content": "Weather in Pune?"}]
    prompt_length = len(render(tokenizer, messages, tools=[get_weather]).ids)
    # the script asks for a day that is not in the tool's enum
    script = '<|tool_call|>{"name": "get_weather", "input": {"city": "Pune", "day": "Friday"}}<|end_tool_call|>'
    client = tiny_client(tokenizer, script, prompt_length)
    free = client.messages.create(messages=messages, tools=[get_weather], max_tokens=80, temperature=0,
                                  constrain_tools=False)
    assert free.stop_reason == "tool_use" and free.content[-1]["input"] == {"city": "Pune", "day": "Friday"}
    with pytest.raises(ToolArgumentsError):
        validate_arguments(get_weather, free.content[-1]["input"])
    fixed = client.messages.create(messages=messages, tools=[get_weather], max_tokens=80, temperature=0)
    call = fixed.content[-1]
    assert fixed.stop_reason == "tool_use" and call["name"] == "get_weather" and call["input"]["city"] == "Pune"
    assert call["input"]["day"] in ("today", "tomorrow")  # the nearest valid call, as the model scores it


def test_the_client_refuses_a_schema_it_cannot_enforce_unless_told(tokenizer):
    odd = {"name": "odd", "description": "An odd tool.",
           "input_schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}}}
    client = tiny_client(tokenizer, "Hi.<|end_turn|>", 10_000)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(UnsupportedSchemaError, match="constrain_tools=False"):
        client.messages.create(messages=messages, tools=[odd], max_tokens=4)
    with pytest.raises(TypeError, match="constrain_tools"):
        client.messages.create(messages=messages, tools=[odd], max_tokens=4, constrain_tools="yes")
    assert client.messages.create(messages=messages, tools=[odd], max_tokens=4, constrain_tools=False).usage


# ------------------------------------------------------------------------------ the measurement
@pytest.mark.parametrize("block, stop_reason, problem", [
    ({"type": "tool_use", "name": "get_weather", "input": {"city": "Pune"}}, "tool_use", None),
    ({"type": "tool_use", "name": "get_weather", "input": {"city": "Pune"}}, "end_turn", "unfinished"),
    ({"type": "tool_use", "name": "", "input": '{"name"', "error": "not JSON"}, "tool_use", "not_json"),
    ({"type": "tool_use", "name": "calculator", "input": {"expression": "1"}}, "tool_use", "unknown_tool"),
    ({"type": "tool_use", "name": "get_weather", "input": {"city": 7}}, "tool_use", "bad_arguments"),
])
def test_call_problem_names_each_reason(block, stop_reason, problem):
    from llmkit.course.call_failures import call_problem

    assert call_problem(block, stop_reason, {"get_weather": get_weather}) == problem


def test_tool_call_validity_on_a_model_that_breaks_calls(tokenizer):
    from llmkit.course.call_failures import INVALID_CALL_REASONS, tool_call_validity

    model = contrarian(tokenizer, lean=6.0)
    free = tool_call_validity(model, tokenizer, constrained=False, temperature=1.0, n=6)
    held = tool_call_validity(model, tokenizer, constrained=True, temperature=1.0, n=6)
    for result in (free, held):
        assert set(result["by_reason"]) == set(INVALID_CALL_REASONS) and result["n"] == 6
        assert result["calls"] == 6  # the model opens a call every time
        assert result["invalid_rate"] == pytest.approx(sum(result["by_reason"].values()), abs=1e-3)
    assert free["invalid_rate"] >= 0.5
    assert {reason for reason, rate in held["by_reason"].items() if rate} <= {"unfinished"}
    assert held["invalid_rate"] < free["invalid_rate"]


def test_tool_call_validity_stops_a_runaway_call_at_its_budget(tokenizer):
    """A call still open after ``max_tokens`` counts as unfinished; a long window is not sampled to its end."""
    from llmkit.course.call_failures import tool_call_validity

    model = contrarian(tokenizer, lean=6.0)
    short = tool_call_validity(model, tokenizer, constrained=True, temperature=1.0, n=4, max_tokens=3)
    assert short["mean_output_tokens"] <= 3
    assert short["by_reason"]["unfinished"] == 1.0  # no call can close within 3 tokens
    with pytest.raises(ValueError, match="max_tokens"):
        tool_call_validity(model, tokenizer, constrained=True, temperature=1.0, n=1, max_tokens=0)


def test_a_stray_end_of_call_outside_a_call_cannot_end_the_turn(tokenizer):
    """Seen with the chat model after a server tool's result: it wrote <|end_tool_call|> in plain
    text, which stops generation as "tool_use" with no call to run. Constrained, it cannot."""
    messages = [{"role": "user", "content": "Weather in Pune?"}]
    prompt_length = len(render(tokenizer, messages, tools=[get_weather]).ids)
    client = tiny_client(tokenizer, "Sunny.<|end_tool_call|><|end_turn|>", prompt_length)
    free = client.messages.create(messages=messages, tools=[get_weather], max_tokens=20, temperature=0,
                                  constrain_tools=False)
    assert free.stop_reason == "tool_use" and not any(b["type"] == "tool_use" for b in free.content)
    fixed = client.messages.create(messages=messages, tools=[get_weather], max_tokens=20, temperature=0)
    assert fixed.stop_reason != "tool_use"
