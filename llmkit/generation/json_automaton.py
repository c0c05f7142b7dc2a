"""A JSON-schema automaton: reads JSON byte by byte and says, after each byte, whether a valid value
can still come of it.

Constrained decoding (``llmkit.chat.constrained`` for tool calls) asks this at every step: which
next bytes keep the text a prefix of a value that fits the schema? The automaton answers without
knowing anything of tokens or tensors. It reads JSON exactly as ``json.dumps(value,
ensure_ascii=False)`` writes it (", " and ": " between items, keys in quotes, non-ASCII text as it
is), the one spelling the chat template uses, so there is one right way to write each value.

Its pieces are one class each, all with the same two questions (``step``: the state after one
more byte, or None; ``done``: may the value end here?): a choice among fixed byte strings (a
literal, a key, an enum value, true/false), a string, an integer or number, an array, an object
(each key at most once, every required key before the ``}``), and pieces in sequence or side by
side. States are small hashable values, so a caller can remember what it computed for a state.

A schema feature it cannot enforce (string lengths, numeric limits, patterns, ...) raises
``UnsupportedSchemaError`` rather than let a value through that might not validate.
"""
from __future__ import annotations

import json
from typing import Any, Hashable, Iterable

State = Hashable
_BYTE = [bytes((b,)) for b in range(256)]
QUOTE, BACKSLASH = ord('"'), ord("\\")
ANNOTATIONS = {"description", "title", "default", "examples"}  # keywords that never reject a value
SCALARS = ("string", "integer", "number", "boolean")
SUPPORTED = ("objects with properties (required, additionalProperties), string, integer, number, boolean, "
             "enum, and arrays of those")


class UnsupportedSchemaError(ValueError):
    """A schema uses a feature the automaton cannot enforce. It refuses rather than let through
    values that might not validate."""


def json_bytes(value: Any) -> bytes:
    """``value`` in the one spelling the automaton reads: ``json.dumps`` with its default separators, UTF-8."""
    return json.dumps(value, ensure_ascii=False).encode()


# --------------------------------------------------------------------------------------- the pieces
class Matcher:
    """Reads one piece of JSON byte by byte. ``step(state, byte)`` is the state after one more byte,
    or None if no valid piece continues that way; ``done(state)`` says the piece may end here.
    States are small hashable values (so a state can key a cache), never mutated."""

    start: State

    def step(self, state: State, byte: int) -> State | None:
        raise NotImplementedError

    def done(self, state: State) -> bool:
        raise NotImplementedError

    def accepts(self, data: bytes) -> bool:
        """Is ``data`` one whole, valid piece?"""
        state = self.read(data)
        return state is not None and self.done(state)

    def read(self, data: bytes, state: State | None = None) -> State | None:
        """The state after ``data`` (from ``state``, else the start), or None if ``data`` can't be a prefix."""
        state = self.start if state is None else state
        for byte in data:
            state = self.step(state, byte)
            if state is None:
                return None
        return state


class Choice(Matcher):
    """One of fixed byte strings: a literal, a key, an enum value, true/false. The options are a
    byte trie and the state is the number of the node reached, so a step is one dictionary lookup
    and building it is linear in the options' total length, even for an enum of 50,000 values."""

    start = 0

    def __init__(self, options: Iterable[bytes]):
        self.children: list[dict[int, int]] = [{}]  # node -> {next byte: child node}; node 0 is the root
        self.ends: set[int] = set()  # nodes where an option is complete
        for option in options:
            node = 0
            for byte in option:
                child = self.children[node].get(byte)
                if child is None:
                    child = len(self.children)
                    self.children.append({})
                    self.children[node][byte] = child
                node = child
            self.ends.add(node)

    def step(self, state: int, byte: int) -> int | None:
        return self.children[state].get(byte)

    def done(self, state: int) -> bool:
        return state in self.ends


# the escapes json.dumps writes: \" \\ \b \f \n \r \t, and \u00XX for the other control characters
ESCAPES = Choice({json_bytes(chr(code))[1:-1] for code in range(0x20)} | {b'\\"', b"\\\\"})


def _utf8_starts() -> dict[int, tuple]:
    """First byte of a multi-byte UTF-8 character -> ("utf8", bytes still to come, lowest, highest
    allowed next byte). The narrower ranges after E0, ED, F0 and F4 rule out overlong forms,
    surrogates and code points past U+10FFFF: the bytes must decode, not become U+FFFD."""
    starts = {}
    for byte in range(0xC2, 0xF5):
        more = 1 if byte < 0xE0 else 2 if byte < 0xF0 else 3
        low, high = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(
            byte, (0x80, 0xBF))
        starts[byte] = ("utf8", more, low, high)
    return starts


UTF8_STARTS = _utf8_starts()


class String(Matcher):
    """A JSON string as ``json.dumps(..., ensure_ascii=False)`` writes it: quotes, any character
    as UTF-8 except ``"``, ``\\`` and control characters, which must be escaped."""

    start = "open"

    def step(self, state: State, byte: int) -> State | None:
        if state == "body":  # the common case first: inside the text, between characters
            if byte == QUOTE:
                return "closed"
            if byte == BACKSLASH:
                return ("escape", ESCAPES.step(ESCAPES.start, byte))
            if byte < 0x20:
                return None  # a raw control character: JSON needs it escaped
            return "body" if byte < 0x80 else UTF8_STARTS.get(byte)
        if state == "open":
            return "body" if byte == QUOTE else None
        if state == "closed":
            return None
        if state[0] == "escape":
            written = ESCAPES.step(state[1], byte)
            if written is None:
                return None
            return "body" if ESCAPES.done(written) else ("escape", written)
        _, more, low, high = state  # inside a multi-byte character
        if not low <= byte <= high:
            return None
        return "body" if more == 1 else ("utf8", more - 1, 0x80, 0xBF)

    def done(self, state: State) -> bool:
        return state == "closed"


class Pattern(Matcher):
    """A tiny automaton given as a table, state -> {characters: next state}: integers and numbers."""

    start = "start"

    def __init__(self, table: dict[str, dict[str, str]], accepting: Iterable[str]):
        self.table = {state: {ord(ch): after for chars, after in edges.items() for ch in chars}
                      for state, edges in table.items()}
        self.accepting = frozenset(accepting)

    def step(self, state: str, byte: int) -> str | None:
        return self.table[state].get(byte)

    def done(self, state: str) -> bool:
        return state in self.accepting


DIGITS, NONZERO = "0123456789", "123456789"
# an integer as Python writes one: no leading zeros, no "-0", no fraction or exponent
INTEGER = Pattern({"start": {"-": "minus", "0": "zero", NONZERO: "digits"}, "minus": {NONZERO: "digits"},
                   "zero": {}, "digits": {DIGITS: "digits"}}, accepting=("zero", "digits"))
# any JSON number (Python writes floats as 2.5, 1e+16, 1.5e-07: all of them fit)
NUMBER = Pattern({"start": {"-": "minus", "0": "zero", NONZERO: "int"}, "minus": {"0": "zero", NONZERO: "int"},
                  "zero": {".": "point", "eE": "e"}, "int": {DIGITS: "int", ".": "point", "eE": "e"},
                  "point": {DIGITS: "fraction"}, "fraction": {DIGITS: "fraction", "eE": "e"},
                  "e": {"+-": "e_sign", DIGITS: "exponent"}, "e_sign": {DIGITS: "exponent"},
                  "exponent": {DIGITS: "exponent"}},
                 accepting=("zero", "int", "fraction", "exponent"))
BOOLEAN = Choice([b"true", b"false"])


class Array(Matcher):
    """``[item, item, ...]`` with ", " between items (``[]`` when empty)."""

    start = "open"

    def __init__(self, item: Matcher):
        self.item = item

    def step(self, state: State, byte: int) -> State | None:
        if state == "open":
            return "first" if byte == ord("[") else None
        if state == "closed":
            return None
        if state == "comma":
            return ("item", self.item.start) if byte == ord(" ") else None
        if state == "first":
            if byte == ord("]"):
                return "closed"
            state = ("item", self.item.start)
        inner = self.item.step(state[1], byte)
        if inner is not None:
            return ("item", inner)
        if not self.item.done(state[1]):
            return None
        # the item is complete and this byte does not continue it
        return "comma" if byte == ord(",") else "closed" if byte == ord("]") else None

    def done(self, state: State) -> bool:
        return state == "closed"


class Object(Matcher):
    """The arguments: ``{"key": value, ...}`` with ", " and ": ", only the schema's keys, each at most
    once, and ``}`` only once every required key is there. The state is (where, keys written, ...)."""

    start = ("open",)

    def __init__(self, properties: dict[str, Matcher], required: Iterable[str]):
        self.values = properties
        self.required = frozenset(required)
        self.key_text = {key: json_bytes(key) + b": " for key in properties}  # a key and its colon, as written
        self.keys_by_prefix: dict[bytes, set[str]] = {}
        for key, text in self.key_text.items():
            for i in range(1, len(text) + 1):
                self.keys_by_prefix.setdefault(text[:i], set()).add(key)

    def step(self, state: tuple, byte: int) -> tuple | None:
        where = state[0]
        if where == "open":
            return ("first", frozenset()) if byte == ord("{") else None
        if where == "value":
            _, written, key, inner = state
            value = self.values[key]
            after = value.step(inner, byte)
            if after is not None:
                return ("value", written, key, after)
            return self._after_value(written, byte) if value.done(inner) else None
        if where == "key":
            return self._key(state[1], state[2], byte)
        if where == "first":
            if byte == ord("}"):
                return ("closed",) if not self.required else None
            return self._key(state[1], b"", byte)
        if where == "comma":
            return ("key", state[1], b"") if byte == ord(" ") else None
        return None  # closed

    def _key(self, written: frozenset, text: bytes, byte: int) -> tuple | None:
        text += _BYTE[byte]
        keys = self.keys_by_prefix.get(text, set()) - written  # a key may appear only once
        if not keys:
            return None
        whole = [key for key in keys if self.key_text[key] == text]
        if whole:
            key = whole[0]
            return ("value", written | {key}, key, self.values[key].start)
        return ("key", written, text)

    def _after_value(self, written: frozenset, byte: int) -> tuple | None:
        if byte == ord(","):
            return ("comma", written) if len(written) < len(self.values) else None  # a key must remain
        if byte == ord("}"):
            return ("closed",) if self.required <= written else None
        return None

    def done(self, state: tuple) -> bool:
        return state[0] == "closed"


class Sequence(Matcher):
    """Matchers one after another. The state is (which part, that part's state)."""

    def __init__(self, parts: Iterable[Matcher]):
        self.parts = tuple(parts)
        self.start = (0, self.parts[0].start)

    def step(self, state: tuple, byte: int) -> tuple | None:
        index, inner = state
        while True:
            part = self.parts[index]
            after = part.step(inner, byte)
            if after is not None:
                return (index, after)
            if not part.done(inner) or index + 1 == len(self.parts):
                return None
            index, inner = index + 1, self.parts[index + 1].start  # the part ended; the byte starts the next

    def done(self, state: tuple) -> bool:
        index, inner = state
        return index == len(self.parts) - 1 and self.parts[index].done(inner)


class OneOf(Matcher):
    """Several matchers read side by side, each kept while the bytes still fit it (the calls of
    different tools share ``{"name": "`` until their names differ). The state is a tuple of
    (alternative, its state) for the ones still alive."""

    def __init__(self, alternatives: Iterable[Matcher]):
        self.alternatives = tuple(alternatives)
        self.start = tuple((i, alternative.start) for i, alternative in enumerate(self.alternatives))

    def step(self, state: tuple, byte: int) -> tuple | None:
        alive = []
        for i, inner in state:
            after = self.alternatives[i].step(inner, byte)
            if after is not None:
                alive.append((i, after))
        return tuple(alive) or None

    def done(self, state: tuple) -> bool:
        return any(self.alternatives[i].done(inner) for i, inner in state)


# --------------------------------------------------------------------------------------- schemas
def value_matcher(schema: Any, where: str) -> Matcher:
    """The matcher for values of one JSON schema, or ``UnsupportedSchemaError`` naming the feature."""
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError(f"{where}: a schema must be a JSON object (a dict), got {schema!r}")
    keywords = set(schema) - ANNOTATIONS
    _only(keywords, {"type", "enum", "items", "properties", "required", "additionalProperties"}, where)
    if "enum" in schema:
        _only(keywords, {"enum", "type"}, where)
        return _enum_matcher(schema, where)
    kind = schema.get("type")
    if not isinstance(kind, str):
        raise UnsupportedSchemaError(f"{where}: 'type' must be one type name; got {kind!r} (supported: {SUPPORTED})")
    if kind in SCALARS:
        _only(keywords, {"type"}, where)
        return {"string": String(), "integer": INTEGER, "number": NUMBER, "boolean": BOOLEAN}[kind]
    if kind == "array":
        _only(keywords, {"type", "items"}, where)
        if "items" not in schema:
            raise UnsupportedSchemaError(f"{where}: an array needs 'items' (a schema for its elements)")
        return Array(value_matcher(schema["items"], f"{where}.items"))
    if kind == "object":
        return object_matcher(schema, where)
    raise UnsupportedSchemaError(f"{where}: type {kind!r} is not supported (supported: {SUPPORTED})")


def _enum_matcher(schema: dict, where: str) -> Choice:
    """An enum: a choice among its values as JSON. A value its own type's matcher rejects (the ``"7"``
    of an integer enum) could never validate, so it is left out; each value is read once, so a
    50,000-value enum costs 50,000 short reads, not 50,000 squared."""
    values, kind = schema["enum"], schema.get("type")
    if not isinstance(values, list):
        raise UnsupportedSchemaError(f"{where}: enum must be a list of values, got {values!r}")
    if kind is not None and kind not in SCALARS:
        raise UnsupportedSchemaError(f"{where}: an enum of type {kind!r} is not supported; give one of "
                                     f"{', '.join(SCALARS)}, or leave 'type' out (the values say what is allowed)")
    of_its_type = value_matcher({"type": kind}, where) if kind is not None else None
    valid = [json_bytes(value) for value in values]
    if of_its_type is not None:
        valid = [text for text in valid if of_its_type.accepts(text)]
    if not valid:
        raise UnsupportedSchemaError(f"{where}: no value of its enum fits its type, so no value could be valid")
    return Choice(valid)


def object_matcher(schema: dict, where: str) -> Object:
    """The matcher for an object schema with ``properties`` (a tool's ``input_schema``)."""
    if schema.get("type") != "object":
        raise UnsupportedSchemaError(f"{where}: the arguments must be an object schema (type 'object'), "
                                     f"got type {schema.get('type')!r}")
    _only(set(schema) - ANNOTATIONS, {"type", "properties", "required", "additionalProperties"}, where)
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        raise UnsupportedSchemaError(f"{where}: 'properties' must be a dict and 'required' a list")
    if not isinstance(schema.get("additionalProperties", False), bool):
        raise UnsupportedSchemaError(f"{where}: additionalProperties as a schema is not supported; use true or false")
    missing = [key for key in required if key not in properties]
    if missing:
        raise UnsupportedSchemaError(f"{where}: required key(s) {missing} are not in 'properties', so the "
                                     "constraint would never write them; describe them under 'properties'")
    return Object({key: value_matcher(value, f"{where}.{key}") for key, value in properties.items()}, required)


def _only(keywords: set[str], allowed: set[str], where: str) -> None:
    extra = sorted(keywords - allowed)
    if extra:
        raise UnsupportedSchemaError(
            f"{where} uses {', '.join(repr(k) for k in extra)}, which constrained decoding cannot enforce "
            f"(supported: {SUPPORTED}); drop it from the schema, or turn the constraint off "
            "(for tools: constrain_tools=False in the client)")
