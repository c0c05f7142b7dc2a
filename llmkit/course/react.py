"""The legacy way to call tools: a ReAct-style text protocol, parsed with regular expressions.

Today's chat model calls a tool in a *structured* way (``llmkit.chat.template``): control tokens it
was trained on, ``<|tool_call|>{"name": ..., "input": {...}}<|end_tool_call|>``, and JSON the harness
reads straight off. Before models were trained for tools, agents (ReAct, Yao et al., 2022) spelled a
text format out in the prompt and hoped the model kept to it::

    Thought: Tomorrow's weather isn't in my training data.
    Action: get_weather(city="Pune", day="tomorrow")

The harness stops generation at ``Observation:`` (``STOP_SEQUENCE``: left alone, the model would
write the tool's result itself), pulls the tool's name and arguments out of the Action line with
regular expressions, runs the tool, appends ``Observation: <result>`` as ordinary text and lets the
model continue to ``Answer: ...``.

Nothing enforces that shape. A stray word, a missing quote or parenthesis, a tool that doesn't
exist, and the parser has nothing to run. ``parse_action`` therefore says *why* a reply failed
(``ParseFailure``), so failures can be counted: ``llmkit.course.call_failures.react_parse_failures`` samples
replies to held-out questions and reports the rate of each reason::

    python -m llmkit react --model chat --json

The argument syntax is small on purpose: ``key="text"`` or ``key=number`` pairs, separated by
commas. Strings are written as JSON string literals (``format_action`` escapes ``"`` as ``\\"``
and ``\\`` as ``\\\\``), so any text, quotes, commas and parentheses included, survives the trip.
Lists, booleans and nested objects can't be written; that is one more thing structured calls do.

(The measurement lives in ``llmkit.course.evals`` because it needs the held-out ``react`` conversations,
and ``llmkit.course.conversations`` builds those from this module: imports only point down.)
"""
from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from llmkit.chat.template import ERROR_PREFIX
from llmkit.chat.tool_signature import signature
from llmkit.chat.tools import Tool, ToolArgumentsError, tools_by_name, validate_arguments
from llmkit.course.tools import EXAMPLE_TOOLS

THOUGHT, ACTION, OBSERVATION, ANSWER = "Thought: ", "Action: ", "Observation: ", "Answer: "
STOP_SEQUENCE = "Observation:"  # the harness, not the model, writes what comes after it
TEMPERATURES = (0.7, 1.0, 1.5)  # what the command line measures


def react_instructions(tools: Iterable[Tool | dict] = EXAMPLE_TOOLS) -> str:
    """The system prompt of the ReAct protocol: the format, then one ``name(arg: type, ...)`` line per tool.

    Kept short on purpose: it was written for the first course model's 256-token window, where a
    weather conversation (question, thought, action, a 79-token observation, answer) had to fit beside it. So defaults are left
    out of the signatures; ``?`` marks an argument that may be left out.
    """
    lines = []
    for item in tools:
        definition = item.definition() if isinstance(item, Tool) else item
        if not isinstance(definition, dict) or not {"name", "input_schema"} <= set(definition):
            raise TypeError(f"tools must be Tool objects or tool definitions (dicts with name and input_schema), "
                            f"got {item!r}")
        lines.append(f"{definition['name']}({signature(_without_defaults(definition['input_schema']))})")
    if not lines:
        raise ValueError("the ReAct instructions need at least one tool to list")
    return ('Write Thought: then Action: tool(key="text") and stop. After Observation: write Answer:\nTools:\n'
            + "\n".join(lines))


def _without_defaults(schema: dict) -> dict:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    plain = {name: {k: v for k, v in prop.items() if k != "default"} if isinstance(prop, dict) else prop
             for name, prop in properties.items()}
    return {**schema, "properties": plain}


REACT_INSTRUCTIONS = react_instructions(EXAMPLE_TOOLS)


# ---------------------------------------------------------------------------------------------- writing
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a tool or argument name: an identifier


def format_action(name: str, arguments: dict[str, Any]) -> str:
    """The Action line for a call, e.g. ``Action: get_weather(city="Pune", day="tomorrow")``.

    Strings become JSON string literals and numbers JSON numbers, so ``parse_action`` reads back
    exactly these arguments. Anything else (a bool, a list, NaN) has no spelling in this protocol
    and raises ``ValueError``.
    """
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"a tool name in an Action line must be an identifier such as get_weather, got {name!r}")
    if not isinstance(arguments, dict):
        raise TypeError(f"arguments must be a dict of argument name -> value, got {type(arguments).__name__}")
    pairs = [f"{_checked_key(key)}={_literal(key, value)}" for key, value in arguments.items()]
    return f"{ACTION}{name}({', '.join(pairs)})"


def _checked_key(key: Any) -> str:
    if not isinstance(key, str) or not NAME.fullmatch(key):
        raise ValueError(f"argument names must be identifiers such as city, got {key!r}")
    return key


def _literal(key: str, value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # quotes, backslashes and newlines escaped
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return json.dumps(value)
    raise ValueError(f"{key}={value!r}: the ReAct protocol writes only strings and finite numbers; "
                     f"send a {type(value).__name__} with a structured tool call instead")


def format_step(thought: str, name: str, arguments: dict[str, Any]) -> str:
    """What the assistant writes to use a tool: a Thought line, then the Action line."""
    if "\n" in thought:
        raise ValueError("the thought must be one line: the Action line follows it")
    return f"{THOUGHT}{thought}\n{format_action(name, arguments)}"


def format_observation(result: str | dict) -> str:
    """The text the harness appends after running a tool: ``Observation: <result>``.

    ``result`` is the tool's output as text, or a ``tool_result`` block from
    ``llmkit.chat.tools.run_tool_call`` (an error result reads ``Observation: Error: ...``).
    """
    if isinstance(result, dict):
        content = result.get("content")
        if not isinstance(content, str):
            raise TypeError(f"a tool_result block's content must be a str, got {content!r}")
        result = (ERROR_PREFIX if result.get("is_error") else "") + content
    if not isinstance(result, str):
        raise TypeError(f"result must be the tool's output as a str or a tool_result block, "
                        f"got {type(result).__name__}")
    return OBSERVATION + result


def format_answer(text: str) -> str:
    """The assistant's final reply in the protocol: ``Answer: <text>``."""
    return ANSWER + text


# ---------------------------------------------------------------------------------------------- reading
class ParseFailure(str, enum.Enum):
    """Why an Action could not be run, in the order ``parse_action`` checks."""

    NO_ACTION = "no_action"  # no "Action:" in the reply
    UNBALANCED = "unbalanced_parentheses"  # a ( without its ), or a ) too many (outside strings)
    NOT_A_CALL = "not_a_call"  # the Action is not name(...) alone on its line
    BAD_ARGUMENTS = "bad_argument_syntax"  # between the parentheses: not key="text" / key=number pairs
    UNKNOWN_TOOL = "unknown_tool"  # a well-formed call to a tool nobody offered
    INVALID_ARGUMENTS = "invalid_arguments"  # arguments that break the tool's JSON schema


@dataclass(frozen=True)
class ReactAction:
    """What ``parse_action`` found: the tool's ``name`` and ``arguments``, or the ``failure`` and a
    ``detail`` the harness can send back as an error Observation."""

    name: str | None = None
    arguments: dict[str, Any] | None = None
    failure: ParseFailure | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None


ACTION_LINE = re.compile(r"""
    \b Action: [ \t]*          # the keyword, anywhere a word may start ("ReAction:" is not it)
    (?P<call> [^\n]* )         # the rest of that line: what the harness will try to run
""", re.VERBOSE)

STRING = re.compile(r"""
    "                          # a JSON string literal: an opening quote,
    (?: [^"\\\n] | \\. )*      # characters other than quote, backslash and newline, or an escape such as \"
    "                          # and the closing quote
""", re.VERBOSE)

CALL = re.compile(r"""
    (?P<name> [A-Za-z_][A-Za-z0-9_]* )   # the tool's name: get_weather
    [ \t]* \(                            # its opening parenthesis
    (?P<arguments> .* )                  # everything up to ...
    \) [ \t\r]*                          # ... the closing parenthesis at the end of the line
""", re.VERBOSE)

ARGUMENT = re.compile(r"""
    \s* (?P<key> [A-Za-z_][A-Za-z0-9_]* ) \s* = \s*                  # city =
    (?:   (?P<string> "(?:[^"\\\n]|\\.)*" )                            # "Pune" (a JSON string)
        | (?P<number> -?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)? )   # 42, -1.5, 2e3
    )
    \s* (?P<comma> , )?                                                  # a comma before the next one
""", re.VERBOSE)


class _Refused(Exception):
    def __init__(self, failure: ParseFailure, detail: str):
        super().__init__(detail)
        self.failure, self.detail = failure, detail


def parse_action(text: str, tools: Iterable[Tool] = EXAMPLE_TOOLS) -> ReactAction:
    """Read the first Action in a reply and check it can run: a known tool, schema-valid arguments.

    Never raises for what the model wrote: a reply that can't be run comes back with its
    ``failure`` (a ``ParseFailure``) and a ``detail`` saying what is wrong and what to write.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be the model's reply as a str, got {type(text).__name__}")
    by_name = tools_by_name(tools)
    try:
        name, arguments = _read_call(text)
        if name not in by_name:
            available = ", ".join(by_name) or "none"
            raise _Refused(ParseFailure.UNKNOWN_TOOL, f"there is no tool {name!r}; the tools are: {available}")
        try:
            validate_arguments(by_name[name], arguments)
        except ToolArgumentsError as exc:
            raise _Refused(ParseFailure.INVALID_ARGUMENTS, str(exc)) from None
    except _Refused as refused:
        return ReactAction(failure=refused.failure, detail=refused.detail)
    return ReactAction(name=name, arguments=arguments)


def _read_call(text: str) -> tuple[str, dict[str, Any]]:
    """The name and arguments of the first Action line (syntax only: no tool is looked up)."""
    found = ACTION_LINE.search(text)
    if found is None:
        raise _Refused(ParseFailure.NO_ACTION, 'no "Action:" line; write Action: tool(key="text") on its own line')
    call = found["call"].rstrip()
    closing = _first_closing_parenthesis(call)
    if closing is not None and closing != len(call) - 1:
        raise _Refused(ParseFailure.NOT_A_CALL, f"text follows the call's closing parenthesis in {call!r}; "
                                                f"put nothing after the )")
    parts = CALL.fullmatch(call)
    if parts is None:
        raise _Refused(ParseFailure.NOT_A_CALL, f'{call!r} is not a call; write tool(key="text", n=1)')
    return parts["name"], _read_arguments(parts["arguments"])


def _first_closing_parenthesis(call: str) -> int | None:
    """Where the first ``(`` closes; raises UNBALANCED if the parentheses don't pair up.

    Parentheses inside string literals don't count: the literals are first blanked out, keeping
    their length, so positions still match the original line.
    """
    blanked = STRING.sub(lambda literal: '"' + "_" * (len(literal[0]) - 2) + '"', call)
    depth, closing = 0, None
    for position, character in enumerate(blanked):
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth < 0:
                raise _Refused(ParseFailure.UNBALANCED, f"a ) without its ( in {call!r}")
            if depth == 0 and closing is None:
                closing = position
    if depth > 0:
        raise _Refused(ParseFailure.UNBALANCED, f"{depth} ( never closed in {call!r}; end the call with )")
    return closing


def _read_arguments(text: str) -> dict[str, Any]:
    """``key="text", n=1`` -> ``{"key": "text", "n": 1}``, one ARGUMENT match after another."""
    arguments: dict[str, Any] = {}
    position = 0
    while text[position:].strip():
        pair = ARGUMENT.match(text, position)
        if pair is None:
            raise _Refused(ParseFailure.BAD_ARGUMENTS, f"cannot read the arguments from {text[position:]!r}; "
                                                       f'write key="text" or key=number, separated by commas')
        if pair["key"] in arguments:
            raise _Refused(ParseFailure.BAD_ARGUMENTS, f"{pair['key']} is given twice; give each argument once")
        try:
            value = json.loads(pair["string"] or pair["number"])
        except ValueError as exc:  # an escape JSON doesn't know, such as \q
            raise _Refused(ParseFailure.BAD_ARGUMENTS, f"cannot read {pair['string']} ({exc})") from None
        arguments[pair["key"]] = value
        position = pair.end()
        at_end = not text[position:].strip()
        if at_end == bool(pair["comma"]):  # a comma needs a next argument, and the next argument needs a comma
            problem = "a comma with no argument after it" if at_end else f"a missing comma before {text[position:]!r}"
            raise _Refused(ParseFailure.BAD_ARGUMENTS, f"{problem}; separate arguments with one comma")
    return arguments
