"""Tools: ordinary Python functions that a model can ask the harness to run.

A model never runs anything. It reads each tool's *definition* (a name, a description and a
JSON schema for the arguments) in its context, and when it wants one it writes a ``tool_use``
block: the tool's name and the arguments, as JSON text. Our code (the harness) checks that
request, runs the function, and sends the outcome back as a ``tool_result`` block.

This module is that harness side, for one call:

- ``@tool`` turns a typed, documented function into a ``Tool``: the definition is built from
  the type hints and the docstring, so the code and what the model is told cannot drift apart.
- ``validate_arguments`` checks the model's arguments against the schema (with ``jsonschema``)
  before anything runs.
- ``run_tool_call`` turns one request into a ``tool_result`` block. Whatever the model sent
  (broken JSON, wrong arguments, an unknown tool) and whatever the tool did (raised, ran too
  long) comes back as a result with ``is_error: True`` and a message the model can act on, so
  the conversation carries on instead of crashing.
- A time limit is a limit: a tool runs in a worker thread, and a result that arrives after the
  deadline is an error, never a success; a tool marked ``@tool(isolated=True)`` runs in a worker
  process that is killed at the deadline (``llmkit.chat.deadline`` explains the difference).

Docstrings follow the Google convention: the first paragraph describes the tool, and an
``Args:`` section gives one line (or an indented paragraph) per parameter.
"""
from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Iterable, Literal, Union

import jsonschema

from llmkit.chat.deadline import call_in_process, call_in_thread
from llmkit.checks import check_bool, check_number, is_int

DEFAULT_TIMEOUT_S = 10.0

Approve = Callable[[str, dict], Literal["allow", "deny"]]
"""A human-in-the-loop hook: called with the tool's name and its (validated) arguments just
before the tool runs; return ``"allow"`` to run it or ``"deny"`` to send the model an error
result ("denied by the user") instead. This is how a harness keeps control of tools that act
on the world (send mail, delete files): the model can only ask."""

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
SUPPORTED = "str, int, float, bool, Literal[...], list[...] and Optional[...] (with a default)"


class ToolDefinitionError(TypeError):
    """A function cannot become a tool: an unsupported type hint, a missing description, ..."""


class ToolArgumentsError(ValueError):
    """The arguments of a tool call are not valid JSON or do not match the tool's schema."""


# ----------------------------------------------------------------------------------------------
# @tool: function -> definition


class Tool:
    """A function plus the definition the model reads. Calling it calls the function.

    ``server``: a *server tool* is run by the client inside the same ``create`` call (as a hosted
    API runs its web search), and the reply carries the call and its result; a client tool's call
    ends the turn with stop reason "tool_use" and your code runs it. The definition the model reads
    is the same either way: only who runs the tool differs.

    ``isolated``: run each call in a worker process that is killed at the time limit, for tools
    that are slow, untrusted or may hold the GIL; its result must be JSON (or a string), and
    changes it makes to Python objects stay in the worker. Otherwise a call runs in a thread, which
    cannot be stopped: past the limit it is abandoned, and a late result is an error.
    """

    def __init__(self, function: Callable, *, name: str, description: str, input_schema: dict,
                 server: bool = False, isolated: bool = False):
        functools.update_wrapper(self, function)  # keeps __doc__, __name__, __wrapped__
        self.function = function
        self.name = name
        self.description = description
        self.input_schema = input_schema
        self.server = check_bool("server", server)
        self.isolated = check_bool("isolated", isolated)

    def __call__(self, /, *args, **kwargs):
        # positional-only self: a tool may have a parameter named "self" (generated tools can)
        return self.function(*args, **kwargs)

    def definition(self) -> dict:
        """The tool as the Messages API describes it: ``{"name", "description", "input_schema"}`` (a copy)."""
        return {"name": self.name, "description": self.description, "input_schema": copy.deepcopy(self.input_schema)}

    def __repr__(self) -> str:
        flags = "".join(f", {flag}=True" for flag in ("server", "isolated") if getattr(self, flag))
        return f"Tool({self.name!r}{flags})"


def tool(function: Callable | None = None, *, server: bool = False,
         isolated: bool = False) -> Tool | Callable[[Callable], Tool]:
    """Decorator: build a ``Tool`` from ``function``'s name, type hints and Google-style docstring.

    ``@tool`` makes a client tool; ``@tool(server=True)`` a server tool, which the client runs
    itself inside the request; ``@tool(isolated=True)`` one that runs in a process that can be
    stopped at the time limit (see ``Tool``).

    Raises ``ToolDefinitionError`` at decoration time, naming the parameter, for anything the
    model could not be told about precisely: a missing type hint or description, an unsupported
    type, ``*args``/``**kwargs``, or an ``Args:`` entry for a parameter that doesn't exist.
    """
    check_bool("server", server)
    check_bool("isolated", isolated)
    if function is None:
        return functools.partial(tool, server=server, isolated=isolated)
    if not callable(function):
        raise TypeError(f"@tool decorates a function, got {function!r}; write @tool or @tool(server=True)")
    description, argument_docs = parse_docstring(function)
    schema = input_schema(function, argument_docs)
    return Tool(function, name=function.__name__, description=description, input_schema=schema, server=server,
                isolated=isolated)


def parse_docstring(function: Callable) -> tuple[str, dict[str, str]]:
    """Return the docstring's first paragraph and the ``Args:`` descriptions, one per parameter."""
    doc = inspect.getdoc(function)
    if not doc or doc.startswith("Args:"):
        raise ToolDefinitionError(
            f"{function.__name__} needs a docstring whose first paragraph says what it does: "
            "the model reads that description to decide when to call the tool"
        )
    lines = doc.splitlines()
    first_blank = lines.index("") if "" in lines else len(lines)
    description = " ".join(line.strip() for line in lines[:first_blank])
    stripped = [line.rstrip() for line in lines]
    if "Args:" not in stripped:
        return description, {}

    descriptions: dict[str, str] = {}
    item_indent = None
    for line in lines[stripped.index("Args:") + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section (Returns:, Raises:, ...) starts
        item_indent = item_indent or indent
        if indent > item_indent:  # a continuation line of the previous parameter
            descriptions[name] += " " + line.strip()
            continue
        match = re.fullmatch(r"(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line.strip())
        if not match:
            problem = f"cannot read {line.strip()!r} in Args:; write `name: description`"
            raise ToolDefinitionError(f"{function.__name__}: {problem}")
        name, text = match.groups()
        descriptions[name] = text
    return description, descriptions


def input_schema(function: Callable, argument_docs: dict[str, str]) -> dict:
    """The JSON schema of ``function``'s keyword arguments: an object with one property per parameter.

    A parameter with no default is ``required``; one with a default may be left out, and the
    default is shown to the model. ``additionalProperties: false`` makes an invented argument
    an error the model is told about, rather than a ``TypeError`` inside the call.
    """
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function)
    except NameError as exc:
        raise ToolDefinitionError(f"{function.__name__}: a type hint names something undefined ({exc})") from None
    unknown = set(argument_docs) - set(signature.parameters)
    if unknown:
        raise ToolDefinitionError(f"{function.__name__}: Args: describes {sorted(unknown)}, which are not parameters")

    properties, required = {}, []
    for parameter in signature.parameters.values():
        where = f"parameter {parameter.name!r} of {function.__name__}"
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise ToolDefinitionError(f"{where}: tools take named arguments only; remove * / ** / positional-only markers")
        if parameter.name not in hints:
            raise ToolDefinitionError(f"{where} has no type hint; give it one of {SUPPORTED}")
        if parameter.name not in argument_docs:
            fix = f"add `{parameter.name}: ...` under Args: in the docstring"
            raise ToolDefinitionError(f"{where} has no description; {fix}")
        hint, optional = without_none(hints[parameter.name], where)
        if optional and parameter.default is parameter.empty:
            raise ToolDefinitionError(f"{where} is Optional but has no default; add `= None` so the model may leave it out")
        schema = schema_for(hint, where)
        schema["description"] = argument_docs[parameter.name]
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif parameter.default is not None:
            if not ArgumentValidator(schema).is_valid(parameter.default):
                raise ToolDefinitionError(f"{where}: the default {parameter.default!r} does not match its type hint")
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def without_none(hint: Any, where: str) -> tuple[Any, bool]:
    """Split ``Optional[X]`` (``X | None``) into ``(X, True)``; anything else is ``(hint, False)``."""
    if typing.get_origin(hint) not in (Union, types.UnionType):
        return hint, False
    members = [member for member in typing.get_args(hint) if member is not type(None)]
    if len(members) != 1 or len(typing.get_args(hint)) != 2:
        raise ToolDefinitionError(f"{where} has type {hint}; the only union tools support is Optional[X] (X | None)")
    return members[0], True


def schema_for(hint: Any, where: str) -> dict:
    """The JSON schema of one type hint (raises ``ToolDefinitionError`` if it has none)."""
    if hint in JSON_TYPES:
        return {"type": JSON_TYPES[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        kinds = {type(value) for value in args}
        if len(kinds) != 1 or next(iter(kinds)) not in (str, int, bool):
            raise ToolDefinitionError(f"{where}: Literal values must all be str, all int or all bool, got {args}")
        return {"type": JSON_TYPES[type(args[0])], "enum": list(args)}
    if origin is list and len(args) == 1:
        return {"type": "array", "items": schema_for(args[0], f"{where} (its list items)")}
    if hint is list:
        raise ToolDefinitionError(f"{where} is a bare list; say what it holds, such as list[str]")
    raise ToolDefinitionError(f"{where} has type {hint}, which tools do not support; use {SUPPORTED}")


# ----------------------------------------------------------------------------------------------
# Checking the model's arguments


def _is_python_int(checker, instance) -> bool:
    # JSON Schema counts 2.0 as an integer; a Python function expecting int would get a float.
    return is_int(instance)


ArgumentValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_python_int),
)


def parse_arguments(arguments: str | dict) -> dict:
    """The arguments as a dict: a dict is used as is, a string is parsed as one JSON object.

    Parsing is strict: ``NaN``/``Infinity`` and repeated keys are refused, since a repeated key
    would otherwise silently lose one of the model's values.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, parse_constant=_refuse_constant, object_pairs_hook=_refuse_repeated_keys)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            fix = 'send one JSON object such as {"name": "value"}'
            raise ToolArgumentsError(f"the arguments are not valid JSON ({exc}); {fix}") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentsError(f"the arguments must be a JSON object ({{...}}), not {type(arguments).__name__}")
    return arguments


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"the key(s) {repeated} appear more than once")
    return dict(pairs)


def validate_arguments(tool: Tool, arguments: dict) -> None:
    """Raise ``ToolArgumentsError`` listing every way ``arguments`` breaks ``tool``'s schema."""
    errors = ArgumentValidator(tool.input_schema).iter_errors(arguments)
    errors = sorted(errors, key=lambda error: [str(part) for part in error.absolute_path])
    if errors:
        problems = "; ".join(_describe(error) for error in errors)
        raise ToolArgumentsError(f"invalid arguments for {tool.name}: {problems}")


def _describe(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(part) for part in error.absolute_path)
    return f"{path}: {error.message}" if path else error.message


# ----------------------------------------------------------------------------------------------
# Running one call


def tool_result(tool_use_id: str, content: str, *, is_error: bool = False) -> dict:
    """The ``tool_result`` block that carries a tool's output back to the model."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def run_tool_call(
    tools: Iterable[Tool],
    name: str,
    arguments: str | dict,
    *,
    tool_use_id: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    approve: Approve | None = None,
) -> dict:
    """Run the call the model asked for and return its ``tool_result`` block.

    In order: find the tool by name, parse and validate the arguments, ask ``approve`` (if
    given), run the tool with a time limit of ``timeout_s`` seconds (in a thread, or in a process
    for an ``isolated`` tool), and serialise what it returned (a string as is, anything else as
    JSON). A result that arrives after the limit is an error, never a success. Every failure on the model's side or inside the tool comes back as
    ``is_error: True`` with a message for the model; this never raises for those. It does
    raise for mistakes in the calling code: ``tools`` holding a non-``Tool`` or two tools of
    one name, or ``approve`` answering something other than "allow" or "deny".
    """
    check_number("timeout_s", timeout_s, above=0)
    by_name = tools_by_name(tools)
    if name not in by_name:
        available = ", ".join(by_name) or "none"
        return tool_result(tool_use_id, f"unknown tool {name!r}; the available tools are: {available}", is_error=True)
    chosen = by_name[name]
    try:
        arguments = parse_arguments(arguments)
        validate_arguments(chosen, arguments)
    except ToolArgumentsError as exc:
        return tool_result(tool_use_id, str(exc), is_error=True)

    if approve is not None:
        decision = approve(name, copy.deepcopy(arguments))
        if decision == "deny":
            return tool_result(tool_use_id, f"denied by the user: {name} was not run", is_error=True)
        if decision != "allow":
            raise ValueError(f"approve must return 'allow' or 'deny', got {decision!r}")

    run = call_in_process if chosen.isolated else call_in_thread
    outcome = run(chosen, arguments, timeout_s, result_text)
    if outcome.status == "ok":
        return tool_result(tool_use_id, outcome.value)
    return tool_result(tool_use_id, _failure(name, outcome, timeout_s, chosen.isolated), is_error=True)


def result_text(value: Any) -> str:
    """What a tool returned, as the text the model reads: a string as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _failure(name: str, outcome, timeout_s: float, isolated: bool) -> str:
    """The error the model reads for a call that did not produce a usable result."""
    if outcome.status == "raised":
        return f"{name} failed: {outcome.error}"
    if outcome.status == "unsendable":
        return f"{name} returned a result that cannot be sent as JSON ({outcome.error})"
    retry = "try simpler arguments or another approach"
    if outcome.status == "late":
        return (f"{name} took {outcome.seconds:.1f} s, over the limit of {timeout_s:g} s, so its result was "
                f"discarded; {retry}")
    stopped = "was stopped" if isolated else "was abandoned"
    return f"{name} did not finish within {timeout_s:g} s and {stopped}; {retry}"


def tools_by_name(tools: Iterable[Tool]) -> dict[str, Tool]:
    """Index ``tools`` by name, refusing anything that is not a ``Tool`` and repeated names."""
    by_name: dict[str, Tool] = {}
    for item in tools:
        if not isinstance(item, Tool):
            raise TypeError(f"tools must be Tool objects (decorate the function with @tool), got {item!r}")
        if item.name in by_name:
            raise ValueError(f"two tools are named {item.name!r}; the model could not tell them apart")
        by_name[item.name] = item
    return by_name

