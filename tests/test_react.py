"""llmkit.course.react: the ReAct text protocol (write, parse, why parsing fails), its conversation kind,
and the parse-failure measurement."""
import json
import math
import random
import re

import pytest
from hypothesis import given, settings, strategies as st

from llmkit.course import conversations as conv
from llmkit.course import conversation_data as data
from llmkit.course import preferences as prefs
from llmkit import cli
from llmkit.course import react
from llmkit.chat.markers import MARKERS
from llmkit.course.call_failures import react_parse_failures
from llmkit.course.evals import EVAL_KINDS
from llmkit.course.entities import with_fresh_entity
from llmkit.model.transformer import ModelConfig
from llmkit.model.weights import read_config
from llmkit.paths import DATA_DIR
from llmkit.course.react import ParseFailure, format_action, format_observation, parse_action
from llmkit.chat.tools import Tool, run_tool_call, tool
from llmkit.course.tools import EXAMPLE_TOOLS, calculator, get_weather
from scripted_model import ScriptedModel

CONTEXT = read_config(DATA_DIR / "models" / "chat").context_length  # the course model's context length
CHAT = DATA_DIR / "models" / "chat"
needs_chat = pytest.mark.skipif(not (CHAT / "model.safetensors").is_file(),
                                reason="data/models/chat is absent: build it with the commands in its README")


@tool
def note(text: str, count: int = 0, weight: float = 1.0) -> str:
    """Write a note.

    Args:
        text: What to write.
        count: How many times.
        weight: How much it matters.
    """
    return text * count


ANYTHING = Tool(lambda **kwargs: None, name="anything", description="Takes any arguments.",
                input_schema={"type": "object"})  # a schema every object passes: tests the syntax alone

TRICKY_TEXT = st.text(alphabet=st.sampled_from('"\\(),= \'\n\tAction:éx)('), max_size=30) | st.text(max_size=30)
NUMBERS = st.integers(-10**30, 10**30) | st.floats(allow_nan=False, allow_infinity=False)
IDENTIFIERS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)


# ---------------------------------------------------------------------------------------------- round trip
@settings(max_examples=300, deadline=None)
@given(text=TRICKY_TEXT, count=st.integers(-10**6, 10**6) | st.none(), weight=st.floats(-1e9, 1e9) | st.none())
def test_format_then_parse_gives_back_the_arguments(text, count, weight):
    arguments = {"text": text, **({"count": count} if count is not None else {}),
                 **({"weight": weight} if weight is not None else {})}
    line = format_action("note", arguments)
    assert "\n" not in line  # one line, whatever the text holds
    action = parse_action(line, [note])
    assert action.ok, action.detail
    assert action.name == "note" and action.arguments == arguments
    assert [type(v) for v in action.arguments.values()] == [type(v) for v in arguments.values()]  # 3 stays int


@settings(max_examples=200, deadline=None)
@given(arguments=st.dictionaries(IDENTIFIERS, TRICKY_TEXT | NUMBERS, max_size=4), thought=st.text(
    alphabet=st.characters(blacklist_characters="\n"), max_size=20))
def test_a_whole_step_round_trips_with_any_names_and_values(arguments, thought):
    reply = react.format_step(thought, "anything", arguments) + "\n"
    action = parse_action(reply, [ANYTHING])
    assert action.ok, action.detail
    assert action.arguments == arguments


@pytest.mark.parametrize("name, arguments", [
    ("note", {"text": True}),  # bools have no spelling in the protocol
    ("note", {"text": ["a", "b"]}),
    ("note", {"text": {"nested": 1}}),
    ("note", {"weight": math.nan}),
    ("note", {"weight": math.inf}),
    ("note", {"bad key": "x"}),
    ("get weather", {}),
    ("", {}),
])
def test_what_the_protocol_cannot_write_is_refused_clearly(name, arguments):
    with pytest.raises(ValueError, match="identifier|strings and finite numbers"):
        format_action(name, arguments)


def test_format_action_spelling():
    assert format_action("get_weather", {"city": "Pune", "day": "tomorrow"}) == \
        'Action: get_weather(city="Pune", day="tomorrow")'
    assert format_action("note", {"text": 'say "hi", (twice)', "count": 2}) == \
        r'Action: note(text="say \"hi\", (twice)", count=2)'
    assert format_action("calculator", {}) == "Action: calculator()"
    with pytest.raises(ValueError, match="one line"):
        react.format_step("two\nlines", "calculator", {"expression": "1"})


# ---------------------------------------------------------------------------------------------- reading
def test_a_good_reply_parses_and_the_call_runs():
    reply = "Thought: I can't know that.\nAction: get_weather(city=\"Cork\", day=\"tomorrow\")\n"
    action = parse_action(reply)
    assert action.ok and action.failure is None and action.detail == ""
    assert (action.name, action.arguments) == ("get_weather", {"city": "Cork", "day": "tomorrow"})
    result = run_tool_call(EXAMPLE_TOOLS, action.name, action.arguments, tool_use_id="t")
    assert not result["is_error"] and json.loads(result["content"])["city"] == "Cork"


@pytest.mark.parametrize("reply, name, arguments", [
    ('Action: calculator(expression="(1 + 2) * 3")', "calculator", {"expression": "(1 + 2) * 3"}),  # ( in quotes
    ('Action: calculator(expression=")")', "calculator", {"expression": ")"}),
    ('Action:count_letters( word = "a,b" , letter="b" )\r\n', "count_letters", {"word": "a,b", "letter": "b"}),
    ('I will check. Action: get_weather(city="Pune")', "get_weather", {"city": "Pune"}),  # mid-line is fine
    ('Action: get_weather(city="Pune")\nAction: calculator(expression="1")', "get_weather", {"city": "Pune"}),
    ('Action: get_weather(city="P\\u00fcne \\"X\\"")', "get_weather", {"city": 'Püne "X"'}),
    ('Action: note(text="x", count=-3, weight=2.5e-3)', "note", {"text": "x", "count": -3, "weight": 0.0025}),
])
def test_replies_that_parse(reply, name, arguments):
    action = parse_action(reply, [*EXAMPLE_TOOLS, note])
    assert action.ok, action.detail
    assert (action.name, action.arguments) == (name, arguments)


@pytest.mark.parametrize("reply, failure", [
    ("Thought: I know this.\nAnswer: 42", ParseFailure.NO_ACTION),
    ('<|tool_call|>{"name": "get_weather", "input": {"city": "Cork"}}', ParseFailure.NO_ACTION),  # structured
    ('ReAction: get_weather(city="Cork")', ParseFailure.NO_ACTION),  # not the keyword
    ('Action: get_weather(city="Cork"', ParseFailure.UNBALANCED),
    ('Action: get_weather(city="Cork"))', ParseFailure.UNBALANCED),
    ('Action: get_weather((city="Cork")', ParseFailure.UNBALANCED),
    ('Action: calculator(expression="1 + 2)"', ParseFailure.UNBALANCED),  # the ) in quotes closes nothing
    ("Action: get_weather", ParseFailure.NOT_A_CALL),
    ('Action: get weather(city="Cork")', ParseFailure.NOT_A_CALL),
    ('Action: get_weather(city="Cork") and then I answer', ParseFailure.NOT_A_CALL),
    ('Action: [get_weather(city="Cork")]', ParseFailure.NOT_A_CALL),
    ('Action: get_weather(city="Cork")\nthen more (lines are fine)', None),
    ("Action: get_weather(city=Cork)", ParseFailure.BAD_ARGUMENTS),  # unquoted string
    ("Action: get_weather(city='Cork')", ParseFailure.BAD_ARGUMENTS),  # single quotes
    ('Action: get_weather("Cork")', ParseFailure.BAD_ARGUMENTS),  # positional
    ('Action: get_weather(city="Cork" day="today")', ParseFailure.BAD_ARGUMENTS),  # missing comma
    ('Action: get_weather(city="Cork",)', ParseFailure.BAD_ARGUMENTS),  # trailing comma
    ('Action: get_weather(city="Cork", city="Bath")', ParseFailure.BAD_ARGUMENTS),  # repeated
    ('Action: get_weather(city="Co\\qrk")', ParseFailure.BAD_ARGUMENTS),  # an escape JSON doesn't know
    ('Action: get_weather(city="Cork)', ParseFailure.BAD_ARGUMENTS),  # the string never closes
    ("Action: calculator(expression=01)", ParseFailure.BAD_ARGUMENTS),  # not a JSON number
    ('Action: search(query="Cork weather")', ParseFailure.UNKNOWN_TOOL),
    ('Action: get_weather(city="Cork", day="Friday")', ParseFailure.INVALID_ARGUMENTS),  # not in the enum
    ('Action: get_weather(day="today")', ParseFailure.INVALID_ARGUMENTS),  # city missing
    ("Action: get_weather(city=7)", ParseFailure.INVALID_ARGUMENTS),  # wrong type
    ('Action: calculator(expression="1", exact=1)', ParseFailure.INVALID_ARGUMENTS),  # invented argument
    ('Action: count_letters(word="abc", letter="b", letter2="c")', ParseFailure.INVALID_ARGUMENTS),
])
def test_each_failure_reason_is_detected(reply, failure):
    action = parse_action(reply)
    assert action.failure == failure, action.detail
    if failure is not None:
        assert not action.ok and action.name is None and action.arguments is None
        assert len(action.detail) > 10  # says what is wrong


def test_a_tool_that_exists_but_was_not_listed_is_unknown():
    action = parse_action('Action: calculator(expression="1 + 1")', [get_weather])
    assert action.failure == ParseFailure.UNKNOWN_TOOL and "get_weather" in action.detail


def test_the_schema_is_applied_after_the_syntax():
    action = parse_action('Action: get_weather(city="Cork", day="Friday")')
    assert "'Friday' is not one of ['today', 'tomorrow']" in action.detail
    with pytest.raises(TypeError, match="str"):
        parse_action(None)
    assert [f.value for f in ParseFailure] == ["no_action", "unbalanced_parentheses", "not_a_call",
                                               "bad_argument_syntax", "unknown_tool", "invalid_arguments"]


def test_observations_and_instructions():
    assert format_observation("3") == "Observation: 3"
    block = run_tool_call(EXAMPLE_TOOLS, "count_letters", {"word": "kitten", "letter": "t"}, tool_use_id="t")
    assert format_observation(block) == "Observation: 2"
    error = run_tool_call(EXAMPLE_TOOLS, "nope", {}, tool_use_id="t")
    assert format_observation(error).startswith("Observation: Error: unknown tool")
    with pytest.raises(TypeError):
        format_observation(3)
    lines = react.REACT_INSTRUCTIONS.splitlines()
    assert all(keyword in react.REACT_INSTRUCTIONS for keyword in ("Thought:", "Action:", "Observation:", "Answer:"))
    assert lines[-3:] == ["calculator(expression: string)", "count_letters(word: string, letter: string)",
                          'get_weather(city: string, day?: "today"|"tomorrow")']
    assert react.react_instructions([calculator.definition()]).endswith("\ncalculator(expression: string)")
    with pytest.raises(ValueError, match="at least one tool"):
        react.react_instructions([])
    with pytest.raises(TypeError, match="Tool objects"):
        react.react_instructions(["calculator"])


# ---------------------------------------------------------------------------------------------- the react kind
def heldout_react() -> list[data.Conversation]:
    """Every held-out weather question (the longest kind), every held-out word, and a seeded sample."""
    weather = [conv.as_react(conv.weather_conversation(city, day, question=q, thinking=t, split="heldout"))
               for city in data.CITIES["heldout"] for day in ("today", "tomorrow")
               for q in conv.REACT_WEATHER_QUESTIONS for t in data.WEATHER_THINKING]
    letters = [conv.as_react(conv.letters_conversation(random.Random(i), "heldout", word=word))
               for i, word in enumerate(data.words("heldout"))]
    return weather + letters + conv.make_conversations(300, split="heldout", seed=0, kinds=["react"])


def test_react_kind_fits_the_context(tokenizer):
    train = conv.make_conversations(500, split="train", seed=0, kinds=["react"])
    lengths = {c.expected.facts["task"]: 0 for c in train}
    for c in heldout_react() + train:
        lengths[c.expected.facts["task"]] = max(lengths[c.expected.facts["task"]], len(c.render(tokenizer)))
    assert set(lengths) == set(conv.REACT_TASKS)
    assert max(lengths.values()) <= CONTEXT, lengths


def test_react_conversations_are_the_tool_tasks_in_text():
    conversations = conv.make_conversations(90, split="heldout", seed=1, kinds=["react"])
    assert {c.expected.facts["task"] for c in conversations} == set(conv.REACT_TASKS)
    for c in conversations:
        assert c.kind == "react" and c.tools is None
        question, step, observation, answer = (m["content"] for m in c.messages)
        assert [m["role"] for m in c.messages] == ["user", "assistant", "user", "assistant"]
        assert c.prompt == c.messages[:1]  # the Observation is the harness's, not a question
        listed = [t for t in EXAMPLE_TOOLS if t.name in c.expected.facts["tools"]]
        assert c.system == react.react_instructions(listed)
        assert step.startswith("Thought: ") and "\nAction: " in step
        action = parse_action(step, listed)
        assert action.ok and (action.name, action.arguments) == (c.expected.tool, c.expected.tool_input)
        real = run_tool_call(EXAMPLE_TOOLS, action.name, action.arguments, tool_use_id="t")
        assert observation == format_observation(real) and not real["is_error"]
        assert answer.startswith("Answer: ") and all(v in answer for v in c.expected.answer_values)
        for marker in MARKERS.values():
            assert marker not in question + step + observation + answer


def test_react_respects_the_split():
    for split in data.SPLITS:
        for c in conv.make_conversations(200, split=split, seed=2, kinds=["react"]):
            facts = c.expected.facts
            assert c.split == split
            if "city" in facts:
                assert facts["city"] in data.CITIES[split]
            if "word" in facts:
                assert facts["word"] in data.words(split)
            assert set(facts.get("operands", [])) <= set(data.numbers(split))


def test_react_is_asked_for_never_a_default():
    assert "react" not in conv.KINDS and "react" not in EVAL_KINDS
    assert "react" not in {c.kind for c in conv.make_conversations(60)}
    with pytest.raises(ValueError, match="not DPO"):
        prefs.make_preferences(2, kinds=["react"])
    with pytest.raises(ValueError, match="react"):  # the error lists every kind that can be asked for
        conv.make_conversations(2, kinds=["reakt"])
    with pytest.raises(ValueError, match="only"):
        conv.as_react(conv.make_conversations(1, kinds=["memory"])[0])


def test_the_loss_mask_covers_thought_action_and_answer_only(tokenizer):
    for c in conv.make_conversations(30, split="train", seed=4, kinds=["react"]):
        rendered = c.render(tokenizer)
        _, step, observation, answer = (m["content"] for m in c.messages)
        end = MARKERS["end_turn"]
        assert tokenizer.decode(rendered.masked_ids()) == f"{step}{end}{answer}{end}"
        unmasked = tokenizer.decode([t for t, trained in zip(rendered.ids, rendered.mask) if not trained])
        assert observation in unmasked and c.messages[0]["content"] in unmasked and c.system in unmasked


def test_fresh_entities_keep_react_text_and_real_results():
    rng = random.Random(0)
    heldout = set(data.CITIES["heldout"]) | set(data.words("heldout"))
    changed = {"weather": 0, "letters": 0}
    for c in conv.make_conversations(60, split="train", seed=5, kinds=["react"]):
        fresh = with_fresh_entity(c, rng)
        task = c.expected.facts["task"]
        if task == "arithmetic":
            assert fresh is c
            continue
        assert fresh.kind == "react" and fresh.expected.facts["task"] == task
        key = "city" if task == "weather" else "word"
        assert fresh.expected.facts[key] != c.expected.facts[key] and fresh.expected.facts[key] not in heldout
        action = parse_action(fresh.messages[1]["content"], EXAMPLE_TOOLS)
        real = run_tool_call(EXAMPLE_TOOLS, action.name, action.arguments, tool_use_id="t")
        assert fresh.messages[2]["content"] == format_observation(real)
        changed[task] += 1
    assert min(changed.values()) > 0


# ---------------------------------------------------------------------------------------------- the measurement
class RepliesWith(ScriptedModel):
    """Writes the same script after any prompt: the first (prefill) call marks where the reply starts."""

    def forward(self, ids, cache=None, start_pos=None, *, last_only=False):
        if ids.size(1) > 1:
            self.prompt_length = ids.size(1)
        return super().forward(ids, cache, start_pos, last_only=last_only)


def replying(tokenizer, text: str) -> RepliesWith:
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=CONTEXT, d_model=32, n_layers=1,
                               n_heads=2)
    return RepliesWith(config, tokenizer.encode(text, allowed_special="all")).eval()


@pytest.mark.usefixtures("one_thread")
def test_parse_failures_are_counted_by_reason(tokenizer):
    model = replying(tokenizer, 'Thought: check.\nAction: get_weather(city="Cork")\nObservation: rain')
    examples = []
    result = react_parse_failures(model, tokenizer, temperature=1.0, n=6, seed=3, examples=examples)
    without_weather = sum("get_weather" not in c.expected.facts["tools"]
                          for c in conv.make_conversations(6, split="heldout", seed=3, kinds=["react"]))
    assert 0 < without_weather < 6  # both outcomes occur in this sample
    assert result["stop_reasons"] == {"stop_sequence": 6}  # the harness, not the model, writes observations
    assert all(e["reply"].endswith('city="Cork")\n') for e in examples)
    assert result["by_reason"]["unknown_tool"] == round(without_weather / 6, 4)
    assert result["parse_failure_rate"] == pytest.approx(sum(result["by_reason"].values()))
    assert set(result["by_reason"]) == {f.value for f in ParseFailure}

    rambling = react_parse_failures(replying(tokenizer, "I think it will be fine." + MARKERS["end_turn"]),
                                    tokenizer, temperature=0.7, n=3)
    assert rambling["parse_failure_rate"] == rambling["by_reason"]["no_action"] == 1.0
    assert rambling["stop_reasons"] == {"end_turn": 3}
    with pytest.raises(ValueError, match="n must"):
        react_parse_failures(model, tokenizer, temperature=1.0, n=0)


@needs_chat
@pytest.mark.usefixtures("one_thread")
def test_command_line_prints_one_run_per_temperature(capsys):
    cli.main(["react", "--model", "chat", "--n", "2", "--temperatures", "0.7", "1.5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert [run["temperature"] for run in out["runs"]] == [0.7, 1.5]
    for run in out["runs"]:
        assert 0.0 <= run["parse_failure_rate"] <= 1.0 and run["n"] == 2
        assert re.fullmatch(r"[a-z_]+", next(iter(run["stop_reasons"])))
