"""How an offered tool is read and shown to the model: one reader of a tool list, and the short form.

``tool_definitions`` is the one place a tool list is read (the prompt, the constraint and the
client agree on it), and ``check_tool`` the check of one tool. ``signature`` and ``summary`` write
a tool's schema and description compactly, which is what ``llmkit.chat.template.tool_line`` puts
on the tool's line of the prompt.
"""
from __future__ import annotations

import json
import re
from typing import Any

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
PARAMETER_NAME = re.compile(r"[\w-]+")  # what the short signature can show; other names go as JSON
ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.", "approx.", "Mr.", "Mrs.", "Ms.", "Dr.", "St.")


def summary(description: str) -> str:
    """The first sentence of ``description``, on one line (all of it if there is no sentence end).

    A sentence ends at ``.``, ``!`` or ``?`` before a space, but not at the dot of an abbreviation
    such as "e.g." or "U.S." (a full stop is not the only job a dot has)."""
    text = " ".join(description.split())
    for end in re.finditer(r"[.!?](?=\s|$)", text):
        if not _is_abbreviation(text[: end.end()]):
            return text[: end.end()]
    return text


def _is_abbreviation(text: str) -> bool:
    """Does ``text`` end with an abbreviation's dot rather than a sentence's?"""
    word = text.rsplit(" ", 1)[-1].lstrip("(\"'")
    return word.endswith(ABBREVIATIONS) or re.fullmatch(r"(?:\w\.){2,}", word) is not None


def signature(schema: dict) -> str:
    """A tool's input schema as a short parameter list, e.g. ``city: string, day?: "today"|"tomorrow"``."""
    simple = (
        schema.get("type") == "object"
        and set(schema) <= {"type", "properties", "required", "additionalProperties", "description"}
        and schema.get("additionalProperties", False) is False
        and isinstance(schema.get("properties", {}), dict)
        and all(isinstance(name, str) and PARAMETER_NAME.fullmatch(name) for name in schema.get("properties", {}))
    )
    if not simple:
        return _compact_json(_without_descriptions(schema))
    required = schema.get("required", [])
    params = []
    for name, prop in schema.get("properties", {}).items():
        has_default = isinstance(prop, dict) and "default" in prop
        default = f" = {_compact_json(prop['default'])}" if has_default else ""
        optional = "" if name in required or has_default else "?"  # a default already says "may be left out"
        params.append(f"{name}{optional}: {_type_text(prop)}{default}")
    return ", ".join(params)


def _type_text(prop: Any) -> str:
    keys = set(prop) - {"description", "default"} if isinstance(prop, dict) else None
    if keys == {"type"} and prop["type"] in ("string", "integer", "number", "boolean"):
        return prop["type"]
    if keys in ({"enum"}, {"type", "enum"}) and isinstance(prop["enum"], list) and prop["enum"]:
        return "|".join(_compact_json(value) for value in prop["enum"])
    if keys == {"type", "items"} and prop["type"] == "array":
        inner = _type_text(prop["items"])
        return f"({inner})[]" if "|" in inner else f"{inner}[]"
    return _compact_json(_without_descriptions(prop))


def _without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_tool(definition: Any, where: str) -> dict:
    """``definition`` (a ``Tool`` or a definition dict) as a checked dict with a name, description and
    input_schema; ``where`` names it in the error."""
    if hasattr(definition, "definition") and callable(definition.definition):  # an llmkit Tool
        definition = definition.definition()
    if not isinstance(definition, dict):
        raise TypeError(f"{where} must be a Tool or a dict with name, description and input_schema, "
                        f"got {type(definition).__name__}")
    for key, kind in (("name", str), ("description", str), ("input_schema", dict)):
        if key not in definition:
            raise ValueError(f"{where} has no {key!r}; a tool needs a name, a description and an input_schema")
        if not isinstance(definition[key], kind):
            raise TypeError(f"{where}['{key}'] must be a {kind.__name__}, got {definition[key]!r}")
    if not TOOL_NAME.fullmatch(definition["name"]):
        raise ValueError(f"{where}['name'] is {definition['name']!r}; a tool name is 1 to 64 letters, digits, '_' "
                         f"or '-' (no spaces or line breaks, which would change how the tools are shown)")
    return definition


def tool_definitions(tools) -> list[dict]:
    """``tools`` (``llmkit.chat.tools.Tool`` objects or definition dicts) as checked definitions: the
    one place a tool list is read, so the prompt, the constraint and the client agree on it. Two
    tools with one name are refused: the model could not tell them apart."""
    if tools is None:
        return []
    if isinstance(tools, (dict, str)) or not isinstance(tools, (list, tuple)):
        raise TypeError(f"tools must be a list of Tool objects or tool definitions, got {type(tools).__name__}")
    definitions = [check_tool(item, f"tools[{i}]") for i, item in enumerate(tools)]
    names = [definition["name"] for definition in definitions]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"tools has more than one tool named {repeated}; the model could not tell them apart")
    return definitions

