"""Constrained decoding: every tool call the model writes parses and fits its tool's schema.

A trained model usually writes a well-formed call, but "usually" is a probability: at a high
temperature, or in a small model, it sometimes writes broken JSON, a tool that was not offered, or
an argument of the wrong type. Constrained decoding takes the chance away instead of hoping: before
each token of a call is drawn, every token that could not continue a valid call gets a logit of
minus infinity (``llmkit.generation.generate``'s ``constraint=``). Softmax gives those probability 0, and the
model picks among the tokens that keep the call valid, in its own proportions.

How a step decides which tokens are allowed:

1. A call is the JSON ``{"name": ..., "input": {...}}`` exactly as ``llmkit.chat.template`` writes it
   (``json.dumps``: ", " and ": " between items, keys in quotes, non-ASCII text as it is). A small
   automaton built from the offered tools' schemas reads it byte by byte. Its pieces are one class
   each: a choice among fixed byte strings (a tool's opening, a key, an enum value, true/false),
   a string, an integer or number, an array, and the arguments object (each key at most once, every
   required key before the ``}``).
2. A token is allowed if the automaton accepts all of its bytes from the current state. The
   vocabulary is stored as a byte trie, so tokens that share a beginning share the walk and a
   rejected byte rules out every token that starts with it; and the automaton's states are small
   hashable values, so the mask of a state seen before is a dictionary lookup.
3. ``<|end_tool_call|>`` is allowed only where the JSON is complete; no other control token is
   allowed inside a call. Outside a call only ``<|end_tool_call|>`` is banned (a stray one would
   end the turn as "tool_use" with no call in it), and ``<|tool_call|>`` when no tools are offered.

What it cannot do: a call cut off by ``max_tokens`` is still cut off, and valid is not right (a
real city that is the wrong city is still wrong). A schema feature it cannot enforce (string
lengths, numeric limits, patterns, ...) raises ``UnsupportedSchemaError`` rather than let a call
through that might not validate.
"""
from __future__ import annotations

import json
import threading
import weakref
from typing import Any, Hashable, Iterable

import torch

from llmkit.chat.template import marker_ids, tool_definitions
from llmkit.chat.tools import ArgumentValidator

State = Hashable
_BYTE = [bytes((b,)) for b in range(256)]
QUOTE, BACKSLASH = ord('"'), ord("\\")
ANNOTATIONS = {"description", "title", "default", "examples"}  # keywords that never reject a value
SUPPORTED = ("objects with properties (required, additionalProperties), string, integer, number, boolean, "
             "enum, and arrays of those")


class UnsupportedSchemaError(ValueError):
    """A tool's schema uses a feature the constraint cannot enforce. It refuses rather than let
    through calls that might not validate."""


def _json(value: Any) -> bytes:
    """How the chat template writes a value: ``json.dumps`` with its default separators, UTF-8."""
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
ESCAPES = Choice({_json(chr(code))[1:-1] for code in range(0x20)} | {b'\\"', b"\\\\"})


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
        self.key_text = {key: _json(key) + b": " for key in properties}  # a key and its colon, as written
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
        if not isinstance(schema["enum"], list):
            raise UnsupportedSchemaError(f"{where}: enum must be a list of values, got {schema['enum']!r}")
        of_its_type = ArgumentValidator({key: value for key, value in schema.items() if key != "enum"})
        valid = [value for value in schema["enum"] if of_its_type.is_valid(value)]  # one check each, not n
        if not valid:
            raise UnsupportedSchemaError(f"{where}: no value of its enum fits its type, so no call could be valid")
        return Choice(_json(value) for value in valid)
    kind = schema.get("type")
    if not isinstance(kind, str):
        raise UnsupportedSchemaError(f"{where}: 'type' must be one type name; got {kind!r} (supported: {SUPPORTED})")
    if kind in ("string", "integer", "number", "boolean"):
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
            "(constrain_tools=False in the client)")


def call_matcher(definitions: list[dict]) -> Matcher:
    """The whole call for any of ``definitions``: ``{"name": "<name>", "input": <arguments>}``."""
    if not definitions:
        raise ValueError("a tool call needs at least one tool to call")
    return OneOf(Sequence([Choice([b'{"name": ' + _json(d["name"]) + b', "input": ']),
                           object_matcher(d["input_schema"], f"{d['name']}'s input_schema"),
                           Choice([b"}"])])
                 for d in definitions)


# --------------------------------------------------------------------------------------- tokens
class _Trie:
    """The vocabulary as a byte trie: ``ids`` are the tokens whose bytes end at this node."""

    def __init__(self):
        self.children: dict[int, _Trie] = {}
        self.ids: list[int] = []

    def add(self, data: bytes, token: int) -> None:
        node = self
        for byte in data:
            node = node.children.setdefault(byte, _Trie())
        node.ids.append(token)


def dense_vocab_size(tokenizer) -> int:
    """``tokenizer.vocab_size``, once it is clear the ids are (nearly) dense. A mask has one entry per
    id and the grammar looks at every id, so a tokenizer whose special token sits at id 10**9 would
    cost a billion of each; more than half the id range unused is refused instead."""
    vocab_size, special = tokenizer.vocab_size, tokenizer.special_tokens
    ranks = getattr(tokenizer, "mergeable_ranks", None)
    if ranks is None:
        return vocab_size
    used = len(ranks) + len(special)
    if vocab_size > 2 * used:
        name = max(special, key=special.get) if special else None
        where = f" (special token {name!r} has id {special[name]})" if name is not None else ""
        raise ValueError(f"the tokenizer's ids run to {vocab_size - 1} but it has only {used} tokens{where}; a "
                         f"token mask needs an entry per id, so number the special tokens right after the ordinary "
                         f"ones (ids {len(ranks)} and up) and save the tokenizer again")
    return vocab_size


class CallGrammar:
    """A call matcher for one set of tools, with what makes a step cheap for one tokenizer: the
    ordinary tokens as a trie, and the allowed-token mask of every state already seen."""

    def __init__(self, tokenizer, definitions: list[dict]):
        self.matcher = call_matcher(definitions)
        self.vocab_size = dense_vocab_size(tokenizer)
        self.end_call = marker_ids(tokenizer)["end_tool_call"]
        self.special = frozenset(tokenizer.special_tokens.values())
        self.token_bytes: dict[int, bytes] = {}
        self.trie = _Trie()
        for token in range(self.vocab_size):
            if token in self.special:
                continue
            try:
                data = tokenizer.token_bytes(token)
            except ValueError:  # an unused id
                continue
            self.token_bytes[token] = data
            self.trie.add(data, token)
        self._masks: dict[State, torch.Tensor] = {}

    def allowed(self, state: State) -> torch.Tensor:
        """Bool mask over the vocabulary: the tokens that keep the call valid from ``state``."""
        mask = self._masks.get(state)
        if mask is None:
            ids: list[int] = []
            self._collect(self.trie, state, ids)
            if self.matcher.done(state):
                ids.append(self.end_call)
            mask = torch.zeros(self.vocab_size, dtype=torch.bool)
            mask[ids] = True
            self._masks[state] = mask
        return mask

    def _collect(self, node: _Trie, state: State, ids: list[int]) -> None:
        step = self.matcher.step
        for byte, child in node.children.items():
            after = step(state, byte)
            if after is not None:  # else no token starting with these bytes can follow
                ids.extend(child.ids)
                if child.children:
                    self._collect(child, after, ids)

    def advance(self, state: State, token: int) -> State | None:
        """The state after ``token``; None if the token cannot continue the call."""
        data = self.token_bytes.get(token)
        return None if data is None else self.matcher.read(data, state)


_GRAMMARS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {tools key: CallGrammar}
_GRAMMARS_LOCK = threading.Lock()  # clients in several threads may compile grammars at once


def _grammar(tokenizer, definitions: list[dict]) -> CallGrammar:
    """The compiled grammar for these tools, made once per tokenizer and tool set (its cache of
    masks then serves every later request)."""
    key = json.dumps([[d["name"], d["input_schema"]] for d in definitions], sort_keys=True)
    with _GRAMMARS_LOCK:
        per_tokenizer = _GRAMMARS.setdefault(tokenizer, {})
        if key not in per_tokenizer:
            if len(per_tokenizer) >= 64:  # many different tool sets: forget the oldest
                per_tokenizer.pop(next(iter(per_tokenizer)))
            per_tokenizer[key] = CallGrammar(tokenizer, definitions)
        return per_tokenizer[key]


# --------------------------------------------------------------------------------------- the constraint
class ToolCallConstraint:
    """A ``llmkit.generation.sampling.TokenConstraint`` that keeps every tool call valid for ``tools``.

    It follows the assistant's turn as ``parse_assistant`` reads it: text, thinking blocks (where
    ``<|tool_call|>`` is only a stray marker), and tool calls. Inside a call it allows only the
    tokens that keep the JSON a prefix of a valid call. Outside a call it bans only
    ``<|end_tool_call|>`` (a stray one would end the turn as "tool_use" with no call to run) and,
    with no tools, ``<|tool_call|>``. One object follows one continuation, so give
    ``generate`` a function that makes a new one: ``functools.partial(ToolCallConstraint,
    tokenizer, tools)`` (cheap: the compiled grammar is shared per tokenizer and tool set).
    """

    def __init__(self, tokenizer, tools):
        self.markers = marker_ids(tokenizer)
        definitions = tool_definitions(tools)
        self.grammar = _grammar(tokenizer, definitions) if definitions else None
        self.outside = torch.ones(dense_vocab_size(tokenizer), dtype=torch.bool)  # what may be drawn outside a call
        self.outside[self.markers["end_tool_call"]] = False
        if self.grammar is None:
            self.outside[self.markers["tool_call"]] = False
        self.mode = "text"  # "text", "thinking" or "call"
        self.state: State | None = None  # the automaton's state inside a call

    @property
    def in_call(self) -> bool:
        return self.mode == "call"

    def allowed(self) -> torch.Tensor | None:
        if self.mode == "call":
            return self.grammar.allowed(self.state)
        return self.outside

    def advance(self, token: int) -> None:
        if self.mode == "call":
            self._advance_call(token)
        elif self.mode == "thinking":
            if token == self.markers["end_thinking"]:
                self.mode = "text"
        elif token == self.markers["thinking"]:
            self.mode = "thinking"
        elif token == self.markers["tool_call"]:
            if self.grammar is None:
                raise ValueError("<|tool_call|> was drawn although no tools are offered; mask the logits with "
                                 "allowed() before sampling")
            self.mode, self.state = "call", self.grammar.matcher.start

    def _advance_call(self, token: int) -> None:
        if token == self.markers["end_tool_call"] and self.grammar.matcher.done(self.state):
            self.mode, self.state = "text", None
            return
        after = self.grammar.advance(self.state, token)
        if after is None:
            raise ValueError(f"token {token} cannot continue the tool call here; it was not in allowed(), "
                             "so mask the logits with allowed() before sampling")
        self.state = after
