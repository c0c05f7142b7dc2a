"""llmkit.chat.tools: definitions from typed functions, argument checks, and one call -> one tool_result."""
import json
import os
import subprocess
import sys
import threading
import time
from typing import List, Literal, Optional, Union

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.chat.tools import Tool, ToolArgumentsError, ToolDefinitionError, parse_arguments, run_tool_call, tool, tool_result, validate_arguments
from llmkit.course.tools import EXAMPLE_TOOLS, calculator, count_letters, get_weather

# ----------------------------------------------------------------------------------------------
# @tool: schemas


@tool
def search_notes(
    query: str,
    tags: list[str],
    limit: int = 5,
    min_score: float = 0.5,
    exact: bool = False,
    sort: Literal["newest", "oldest", "relevance"] = "relevance",
    page: Optional[int] = None,
    *,
    levels: list[Literal[1, 2, 3]] | None = None,
) -> list:
    """Search the user's notes for text,
    newest first unless asked otherwise.

    A second paragraph is for people reading the code, not for the model.

    Args:
        query: Words to look for.
        tags (list[str]): Only notes with all these tags.
        limit: How many notes to return at most. A description can
            carry on over several indented lines.
        min_score: Lowest relevance score to keep.
        exact: Match whole words only.
        sort: The order of the results.
        page: Which page of results, from 1.
        levels: Heading levels to search in.

    Returns:
        The matching notes.
    """
    return [query, tags, limit, min_score, exact, sort, page, levels]


def test_schema_from_hints_and_docstring():
    assert search_notes.name == "search_notes"
    assert search_notes.description == "Search the user's notes for text, newest first unless asked otherwise."
    schema = search_notes.input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query", "tags"]
    properties = schema["properties"]
    assert list(properties) == ["query", "tags", "limit", "min_score", "exact", "sort", "page", "levels"]
    assert properties["query"] == {"type": "string", "description": "Words to look for."}
    assert properties["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Only notes with all these tags.",
    }
    assert properties["limit"] == {
        "type": "integer",
        "description": "How many notes to return at most. A description can carry on over several indented lines.",
        "default": 5,
    }
    assert properties["min_score"]["type"] == "number" and properties["min_score"]["default"] == 0.5
    assert properties["exact"] == {"type": "boolean", "description": "Match whole words only.", "default": False}
    assert properties["sort"]["enum"] == ["newest", "oldest", "relevance"] and properties["sort"]["type"] == "string"
    # Optional with a None default: not required, and no "default" shown
    assert properties["page"] == {"type": "integer", "description": "Which page of results, from 1."}
    assert properties["levels"]["items"] == {"type": "integer", "enum": [1, 2, 3]}
    jsonschema.Draft202012Validator.check_schema(schema)


def test_definition_is_the_messages_api_shape_and_a_copy():
    definition = search_notes.definition()
    assert set(definition) == {"name", "description", "input_schema"}
    assert definition["input_schema"] == search_notes.input_schema
    assert json.loads(json.dumps(definition)) == definition  # plain JSON
    definition["input_schema"]["properties"].clear()
    assert search_notes.input_schema["properties"]  # the tool's own schema is untouched


def test_tool_is_still_the_function():
    assert isinstance(search_notes, Tool)
    assert search_notes("q", ["a"], limit=2) == ["q", ["a"], 2, 0.5, False, "relevance", None, None]
    assert search_notes.__name__ == "search_notes"
    assert "Args:" in search_notes.__doc__
    assert repr(search_notes) == "Tool('search_notes')"


def test_tool_without_parameters_or_args_section():
    @tool
    def roll_call() -> str:
        """Say who is here."""
        return "everyone"

    assert roll_call.input_schema == {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    assert roll_call() == "everyone"


def test_example_tool_schemas_are_valid():
    for example in EXAMPLE_TOOLS:
        jsonschema.Draft202012Validator.check_schema(example.input_schema)
        assert example.description and all(p["description"] for p in example.input_schema["properties"].values())
    assert get_weather.input_schema["required"] == ["city"]
    assert get_weather.input_schema["properties"]["day"]["enum"] == ["today", "tomorrow"]


# ----------------------------------------------------------------------------------------------
# @tool: clear errors at decoration time


def no_hint(city):
    """Look up a city.

    Args:
        city: The city.
    """


def unsupported_dict(options: dict):
    """Do something.

    Args:
        options: Settings.
    """


def unsupported_tuple(point: tuple[int, int]):
    """Do something.

    Args:
        point: A point.
    """


def bare_list(names: list):
    """Do something.

    Args:
        names: Some names.
    """


def list_of_dicts(rows: list[dict]):
    """Do something.

    Args:
        rows: Some rows.
    """


def plain_union(value: Union[int, str]):
    """Do something.

    Args:
        value: A value.
    """


def optional_without_default(page: Optional[int]):
    """Do something.

    Args:
        page: A page.
    """


def mixed_literal(mode: Literal["a", 1] = "a"):
    """Do something.

    Args:
        mode: A mode.
    """


def default_outside_enum(day: Literal["today", "tomorrow"] = "yesterday"):
    """Do something.

    Args:
        day: A day.
    """


def star_args(*cities: str):
    """Do something.

    Args:
        cities: Cities.
    """


def star_kwargs(**options: str):
    """Do something.

    Args:
        options: Options.
    """


def positional_only(city: str, /):
    """Do something.

    Args:
        city: A city.
    """


def undocumented_parameter(city: str, country: str):
    """Do something.

    Args:
        city: A city.
    """


def documents_a_ghost(city: str):
    """Do something.

    Args:
        city: A city.
        country: A country that is not a parameter.
    """


def unreadable_args(city: str):
    """Do something.

    Args:
        the city to use
    """


def no_docstring(city: str):
    return city


def only_args(city: str):
    """Args:
    city: A city.
    """


@pytest.mark.parametrize(
    "function, message",
    [
        (no_hint, "parameter 'city' of no_hint has no type hint"),
        (unsupported_dict, "parameter 'options' of unsupported_dict has type <class 'dict'>, which tools do not support"),
        (unsupported_tuple, "parameter 'point' .* which tools do not support"),
        (bare_list, "parameter 'names' .* bare list; say what it holds"),
        (list_of_dicts, r"parameter 'rows' of list_of_dicts \(its list items\)"),
        (plain_union, "parameter 'value' .* only union tools support is Optional"),
        (optional_without_default, "parameter 'page' .* add `= None`"),
        (mixed_literal, "parameter 'mode' .* Literal values must all be"),
        (default_outside_enum, "parameter 'day' .* the default 'yesterday' does not match"),
        (star_args, "parameter 'cities' .* take named arguments only"),
        (star_kwargs, "parameter 'options' .* take named arguments only"),
        (positional_only, "parameter 'city' .* take named arguments only"),
        (undocumented_parameter, "parameter 'country' .* has no description; add `country: ...` under Args:"),
        (documents_a_ghost, r"Args: describes \['country'\], which are not parameters"),
        (unreadable_args, "cannot read 'the city to use' in Args:"),
        (no_docstring, "no_docstring needs a docstring"),
        (only_args, "only_args needs a docstring whose first paragraph"),
    ],
)
def test_decoration_errors_name_the_problem(function, message):
    with pytest.raises(ToolDefinitionError, match=message):
        tool(function)


def test_type_hint_naming_something_undefined():
    def uses_missing(city: "Cityy"):  # noqa: F821 - the typo is the point
        """Do something.

        Args:
            city: A city.
        """

    with pytest.raises(ToolDefinitionError, match="undefined"):
        tool(uses_missing)


def test_typing_list_is_accepted():
    def old_style(names: List[str]):
        """Greet people.

        Args:
            names: Who to greet.
        """

    assert tool(old_style).input_schema["properties"]["names"]["items"] == {"type": "string"}


# ----------------------------------------------------------------------------------------------
# Parsing and validating the model's arguments


def test_validate_accepts_good_arguments():
    validate_arguments(search_notes, {"query": "x", "tags": []})
    validate_arguments(search_notes, {"query": "x", "tags": ["a"], "limit": 3, "sort": "oldest", "levels": [1, 3]})


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ({"tags": []}, "'query' is a required property"),
        ({"query": 3, "tags": []}, "query: 3 is not of type 'string'"),
        ({"query": "x", "tags": "a"}, "tags: 'a' is not of type 'array'"),
        ({"query": "x", "tags": [1]}, "tags.0: 1 is not of type 'string'"),
        ({"query": "x", "tags": [], "sort": "random"}, "sort: 'random' is not one of"),
        ({"query": "x", "tags": [], "limit": 2.0}, "limit: 2.0 is not of type 'integer'"),
        ({"query": "x", "tags": [], "limit": True}, "limit: True is not of type 'integer'"),
        ({"query": "x", "tags": [], "page": None}, "page: None is not of type 'integer'"),
        ({"query": "x", "tags": [], "levels": [4]}, "levels.0: 4 is not one of"),
        ({"query": "x", "tags": [], "colour": "red"}, "'colour' was unexpected"),
    ],
)
def test_validate_refuses_bad_arguments(arguments, problem):
    with pytest.raises(ToolArgumentsError, match="invalid arguments for search_notes") as info:
        validate_arguments(search_notes, arguments)
    assert problem in str(info.value)


def test_validate_reports_every_problem():
    with pytest.raises(ToolArgumentsError) as info:
        validate_arguments(search_notes, {"query": 1, "sort": "random"})
    message = str(info.value)
    assert "'tags' is a required property" in message and "query: 1" in message and "sort: 'random'" in message


def test_parse_arguments():
    assert parse_arguments({"a": 1}) == {"a": 1}
    assert parse_arguments('{"a": [1, "b"]}') == {"a": [1, "b"]}


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ('{"a": ', "not valid JSON"),
        ("{'a': 1}", "not valid JSON"),
        ("", "not valid JSON"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": 1, "a": 2}', "appear more than once"),
        ("[1, 2]", "must be a JSON object"),
        ("null", "must be a JSON object"),
        (None, "must be a JSON object"),
        (["a"], "must be a JSON object"),
    ],
)
def test_parse_arguments_refuses(arguments, problem):
    with pytest.raises(ToolArgumentsError, match=problem):
        parse_arguments(arguments)


# ----------------------------------------------------------------------------------------------
# run_tool_call: one request in, one tool_result out, never an exception for the model's mistakes


def test_result_block_shape():
    expected = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42", "is_error": False}
    assert tool_result("toolu_1", "42") == expected


def test_runs_with_json_string_or_dict_arguments():
    from_text = run_tool_call(EXAMPLE_TOOLS, "calculator", '{"expression": "37 * 91"}', tool_use_id="toolu_1")
    from_dict = run_tool_call(EXAMPLE_TOOLS, "calculator", {"expression": "37 * 91"}, tool_use_id="toolu_1")
    assert from_text == from_dict == tool_result("toolu_1", "3367")


def test_results_are_serialised():
    weather = run_tool_call(EXAMPLE_TOOLS, "get_weather", {"city": "Pune"}, tool_use_id="w")
    assert json.loads(weather["content"]) == get_weather("Pune")
    assert not weather["is_error"]
    assert run_tool_call(EXAMPLE_TOOLS, "calculator", {"expression": "7 / 2"}, tool_use_id="c")["content"] == "3.5"

    @tool
    def greet(name: str) -> str:
        """Greet someone.

        Args:
            name: Who.
        """
        return f"héllo {name}"

    assert run_tool_call([greet], "greet", {"name": "Ada"}, tool_use_id="g")["content"] == "héllo Ada"  # a str as is


@tool
def explode(reason: str) -> str:
    """Fail on purpose.

    Args:
        reason: What to say.
    """
    raise RuntimeError(reason)


@tool
def unserialisable(kind: Literal["set", "nan"]) -> object:
    """Return something JSON cannot hold.

    Args:
        kind: Which.
    """
    return {1, 2} if kind == "set" else float("nan")


@tool
def quits() -> None:
    """Call sys.exit."""
    sys.exit(3)


@tool
def returns_an_exception() -> str:
    """Return (not raise) an exception object."""
    return ValueError("just a value")


TOOLS = [*EXAMPLE_TOOLS, explode, unserialisable, quits]


def test_a_returned_exception_is_a_value_not_a_failure():
    result = run_tool_call([returns_an_exception], "returns_an_exception", {}, tool_use_id="r")
    assert result["is_error"] is True and "cannot be sent as JSON" in result["content"]
    assert "failed" not in result["content"]


@pytest.mark.parametrize(
    "name, arguments, message",
    [
        ("get_wether", {"city": "Pune"}, "unknown tool 'get_wether'; the available tools are: calculator, count_letters,"),
        ("get_weather", '{"city": "Pune"', "not valid JSON"),
        ("get_weather", '"Pune"', "must be a JSON object"),
        ("get_weather", {}, "'city' is a required property"),
        ("get_weather", {"city": "Pune", "day": "yesterday"}, "'yesterday' is not one of ['today', 'tomorrow']"),
        ("get_weather", {"city": "Pune", "units": "F"}, "'units' was unexpected"),
        ("get_weather", {"city": "  "}, "get_weather failed: ValueError: city is empty"),
        ("calculator", {"expression": "1 / 0"}, "calculator failed: CalculatorError: division by zero"),
        ("calculator", {"expression": "__import__('os')"}, "not allowed"),
        ("count_letters", {"word": "strawberry", "letter": "rr"}, "letter must be exactly one character"),
        ("explode", {"reason": "boom"}, "explode failed: RuntimeError: boom"),
        ("unserialisable", {"kind": "set"}, "cannot be sent as JSON"),
        ("unserialisable", {"kind": "nan"}, "cannot be sent as JSON"),
        ("quits", {}, "quits failed: SystemExit: 3"),
    ],
)
def test_every_failure_becomes_an_error_result(name, arguments, message):
    result = run_tool_call(TOOLS, name, arguments, tool_use_id="toolu_x")
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_x"
    assert result["is_error"] is True
    assert message in result["content"]


def test_timeout_returns_about_on_time():
    release = threading.Event()
    finished = []

    @tool
    def slow() -> str:
        """Wait until released."""
        release.wait(30)
        finished.append(True)
        return "late"

    start = time.monotonic()
    result = run_tool_call([slow], "slow", {}, tool_use_id="t", timeout_s=0.2)
    elapsed = time.monotonic() - start
    release.set()  # let the abandoned worker thread finish
    assert result["is_error"] is True
    assert "did not finish within 0.2 s and was abandoned" in result["content"]
    assert 0.2 <= elapsed < 5  # generous: the point is that it doesn't wait for the tool


def test_a_zero_timeout_is_a_programming_error():
    with pytest.raises(ValueError, match="timeout_s"):
        run_tool_call(EXAMPLE_TOOLS, "calculator", {"expression": "1"}, tool_use_id="t", timeout_s=0)


def test_approve_deny_allow_and_what_it_sees():
    ran, asked = [], []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email.

        Args:
            to: The address.
            body: The text.
        """
        ran.append(to)
        return "sent"

    def deny(name, arguments):
        asked.append((name, arguments))
        return "deny"

    denied = run_tool_call([send_email], "send_email", '{"to": "a@b.c", "body": "hi"}', tool_use_id="e1", approve=deny)
    assert denied == tool_result("e1", "denied by the user: send_email was not run", is_error=True)
    assert ran == [] and asked == [("send_email", {"to": "a@b.c", "body": "hi"})]  # parsed, not raw text

    arguments = {"to": "a@b.c", "body": "hi"}
    allowed = run_tool_call([send_email], "send_email", arguments, tool_use_id="e2", approve=lambda n, a: "allow")
    assert allowed == tool_result("e2", "sent") and ran == ["a@b.c"]

    invalid = run_tool_call([send_email], "send_email", {"to": "a@b.c"}, tool_use_id="e3", approve=deny)
    assert invalid["is_error"] and "required" in invalid["content"] and len(asked) == 1  # not asked about a bad call

    with pytest.raises(ValueError, match="'allow' or 'deny'"):
        run_tool_call([send_email], "send_email", {"to": "a", "body": "b"}, tool_use_id="e4", approve=lambda n, a: "yes")


def test_tool_list_mistakes_raise():
    with pytest.raises(TypeError, match="decorate the function with @tool"):
        run_tool_call([len], "len", {}, tool_use_id="t")
    with pytest.raises(ValueError, match="two tools are named 'calculator'"):
        run_tool_call([calculator, calculator], "calculator", {"expression": "1"}, tool_use_id="t")


# ----------------------------------------------------------------------------------------------
# The example tools


@pytest.mark.parametrize(
    "word, letter, count",
    [
        ("strawberry", "r", 3),
        ("Strawberry", "R", 3),
        ("STRAWBERRY", "r", 3),
        ("Mississippi", "s", 4),
        ("Mississippi", "M", 1),
        ("banana", "z", 0),
        ("", "a", 0),
        ("café", "É", 1),
        ("cafe\u0301", "é", 1),  # e + combining accent, normalised to é first
        ("Straße", "ß", 1),
    ],
)
def test_count_letters(word, letter, count):
    assert count_letters(word, letter) == count


@settings(deadline=None)  # shared CI machines are noisy; the property, not the speed, is under test
@given(st.text(alphabet="abcABC xyz", max_size=30), st.sampled_from("abcABCxyz"))
def test_count_letters_is_case_insensitive_counting(word, letter):
    assert count_letters(word, letter) == word.lower().count(letter.lower())


def test_count_letters_needs_one_letter():
    for bad in ["", "rr"]:
        with pytest.raises(ValueError, match="exactly one character"):
            count_letters("strawberry", bad)


CITIES = ["Pune", "Paris", "Lagos", "Lima", "Oslo", "Tokyo", "Cairo", "Quito", "Perth", "Delhi", "Seoul", "Accra"]


def test_get_weather_is_deterministic_and_plausible():
    for city in CITIES:
        for day in ["today", "tomorrow"]:
            report = get_weather(city, day)
            assert report == get_weather(city, day)
            assert set(report) == {"city", "day", "condition", "chance_of_rain_percent", "high_c", "low_c"}
            assert report["city"] == city and report["day"] == day
            assert 0 <= report["chance_of_rain_percent"] <= 100
            assert 12 <= report["high_c"] <= 37 and report["low_c"] < report["high_c"]
            wet = report["chance_of_rain_percent"] >= 70
            assert (report["condition"] == "rain") == wet
    assert get_weather("  pune ") == get_weather("Pune") | {"city": "pune"}  # case and spaces ignored
    assert get_weather("Pune") == get_weather("Pune", "today")


def test_get_weather_differs_across_cities_and_days():
    def numbers(report):
        return (report["chance_of_rain_percent"], report["high_c"], report["low_c"])

    assert len({numbers(get_weather(city)) for city in CITIES}) >= len(CITIES) - 1
    assert sum(numbers(get_weather(c, "today")) != numbers(get_weather(c, "tomorrow")) for c in CITIES) >= len(CITIES) - 1


def test_fresh_process_same_weather_and_chat_tools_import_no_higher_floor():
    # One subprocess (importing jsonschema takes a second or two) checks two things: the weather
    # does not depend on PYTHONHASHSEED (Python's hash() of a str does), and the tools import nothing
    # from higher floors of the package.
    code = (
        "import json, sys; from llmkit.course.tools import get_weather; "
        f"weather = [get_weather(c) for c in {CITIES!r}]; "
        "print(json.dumps([weather, sorted(m for m in sys.modules if m.startswith('llmkit'))]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    weather, modules = json.loads(output)
    assert weather == [get_weather(city) for city in CITIES]
    # the chat floor (llmkit.chat.tools) pulls in only its runner and the shared checks; the example
    # tools add the calculator
    assert set(modules) <= {"llmkit", "llmkit.paths", "llmkit.checks", "llmkit.chat", "llmkit.chat.tools",
                            "llmkit.chat.deadline", "llmkit.course", "llmkit.course.tools",
                            "llmkit.course.calculator"}


def test_a_tool_may_have_a_parameter_named_self():
    from llmkit.chat.tools import Tool, run_tool_call

    echo = Tool(lambda **kwargs: kwargs["self"] + 1, name="bump", description="Add one.",
                input_schema={"type": "object", "properties": {"self": {"type": "integer"}}, "required": ["self"]})
    assert echo(self=848) == 849
    assert run_tool_call([echo], "bump", {"self": 848}, tool_use_id="toolu_0")["content"] == "849"
