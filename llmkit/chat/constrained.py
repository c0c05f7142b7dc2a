"""Constrained decoding: every tool call the model writes parses and fits its tool's schema.

A trained model usually writes a well-formed call, but "usually" is a probability: at a high
temperature, or in a small model, it sometimes writes broken JSON, a tool that was not offered, or
an argument of the wrong type. Constrained decoding takes the chance away instead of hoping: before
each token of a call is drawn, every token that could not continue a valid call gets a logit of
minus infinity (``llmkit.generation.generate``'s ``constraint=``). Softmax gives those probability 0, and the
model picks among the tokens that keep the call valid, in its own proportions.

How a step decides which tokens are allowed:

1. A call is the JSON ``{"name": ..., "input": {...}}`` exactly as ``llmkit.chat.template`` writes it
   (``json.dumps``: ", " and ": " between items, keys in quotes, non-ASCII text as it is). The
   JSON-schema automaton of ``llmkit.generation.json_automaton``, built from the offered tools'
   schemas, reads it byte by byte; this module adds the call's shape and the tokens.
2. A token is allowed if the automaton accepts all of its bytes from the current state. The
   vocabulary is stored as a byte trie, so tokens that share a beginning share the walk and a
   rejected byte rules out every token that starts with it; and the automaton's states are small
   hashable values, so the mask of a state seen before is a dictionary lookup.
3. ``<|end_tool_call|>`` is allowed only where the JSON is complete; no other control token is
   allowed inside a call. Outside a call only ``<|end_tool_call|>`` is banned (a stray one would
   end the turn as "tool_use" with no call in it), and ``<|tool_call|>`` when no tools are offered.
4. The tool's name is chosen whole: at the start of a call the constraint offers each offered tool's
   opening (``{"name": "<name>", "input``) and the loop picks the one the model finds most likely
   as a whole (``llmkit.generation.choice``), instead of committing to the name's first token. A
   small model often knows *which* tool fits (the words after ``get_`` say so) but not how its
   name begins; masking alone would let that first guess decide.
5. With ``copy_from`` (the client's ``constrain_tools="copy"``) each argument's value is chosen whole
   the same way, among the values the conversation holds: the spans of what the user said and what
   tools returned, its numbers, an ``enum``'s or a boolean's options (``llmkit.chat.value_copy``).

What it cannot do: a call cut off by ``max_tokens`` is still cut off, and valid is not right (a
real city that is the wrong city is still wrong). A schema feature it cannot enforce (string
lengths, numeric limits, patterns, ...) raises ``UnsupportedSchemaError`` rather than let a call
through that might not validate.
"""
from __future__ import annotations

import json
import threading
import weakref

import torch

from llmkit.chat.markers import marker_ids
from llmkit.chat.tool_signature import tool_definitions
from llmkit.chat.value_copy import ValueChoice
from llmkit.generation.json_automaton import (Choice, Matcher, OneOf, Sequence, State, json_bytes,
                                             object_matcher)


def call_matcher(definitions: list[dict]) -> Matcher:
    """The whole call for any of ``definitions``: ``{"name": "<name>", "input": <arguments>}``."""
    if not definitions:
        raise ValueError("a tool call needs at least one tool to call")
    return OneOf(Sequence([Choice([b'{"name": ' + json_bytes(d["name"]) + b', "input": ']),
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
        self.openings = call_openings(tokenizer, definitions)

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


def call_openings(tokenizer, definitions: list[dict]) -> list[list[int]] | None:
    """The tokens of each call's opening, ``{"name": "<name>", "input``, as the chat template
    tokenises a whole call: the options ``ToolCallConstraint`` offers, so the tool is chosen by the
    model's probability of its whole name (``llmkit.generation.choice``). None when some opening
    would be split differently inside a whole call: then the name is chosen token by token."""
    openings = []
    for definition in definitions:
        opening = b'{"name": ' + json_bytes(definition["name"]) + b', "input'
        ids = tokenizer.encode(opening.decode())
        whole = tokenizer.encode((opening + b": {}}").decode())
        if whole[:len(ids)] != ids:
            return None
        openings.append(ids)
    return openings


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
    ``choose_names=False`` picks the name token by token, like every other part of the call.
    """

    def __init__(self, tokenizer, tools, *, choose_names: bool = True, copy_from: list[str] | None = None):
        self.markers = marker_ids(tokenizer)
        definitions = tool_definitions(tools)
        self.values = ValueChoice(tokenizer, definitions, copy_from) if copy_from is not None and definitions else None
        self.grammar = _grammar(tokenizer, definitions) if definitions else None
        self.outside = torch.ones(dense_vocab_size(tokenizer), dtype=torch.bool)  # what may be drawn outside a call
        self.outside[self.markers["end_tool_call"]] = False
        if self.grammar is None:
            self.outside[self.markers["tool_call"]] = False
        self.mode = "text"  # "text", "thinking" or "call"
        self.state: State | None = None  # the automaton's state inside a call
        self.choose_names = choose_names and self.grammar is not None and self.grammar.openings is not None
        self.forced: list[int] = []  # the rest of the chosen option (a name's opening, a value), still to be written
        self.offered: list[list[int]] = []  # the options of the last choice offered
        self.call_bytes = bytearray()  # what this call has written so far

    @property
    def in_call(self) -> bool:
        return self.mode == "call"

    def allowed(self) -> torch.Tensor | None:
        if self.forced:
            only = torch.zeros_like(self.outside)
            only[self.forced[0]] = True
            return only
        if self.mode == "call":
            return self.grammar.allowed(self.state)
        return self.outside

    def choices(self) -> list[list[int]] | None:
        """At the start of a call, with ``choose_names``: every offered tool's call opening, so the
        tool is chosen by the probability of its whole name (``llmkit.generation.choice``). With
        ``copy_from``, where an argument's value comes next: its candidate values (``ValueChoice``)."""
        if self.forced or self.mode != "call":
            return None
        if self.choose_names and self.state == self.grammar.matcher.start:
            self.offered = self.grammar.openings
        elif self.values is not None:
            self.offered = self.values.options(bytes(self.call_bytes), self.state, self.grammar)
        else:
            return None
        return self.offered or None

    def choose(self, index: int) -> None:
        self.forced = list(self.offered[index])

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
            self.call_bytes.clear()

    def _advance_call(self, token: int) -> None:
        if self.forced:
            if token != self.forced[0]:
                raise ValueError(f"token {token} was drawn where the chosen tool's name goes on with "
                                 f"{self.forced[0]}; mask the logits with allowed() before sampling")
            self.forced.pop(0)
        if token == self.markers["end_tool_call"] and self.grammar.matcher.done(self.state):
            self.mode, self.state = "text", None
            return
        after = self.grammar.advance(self.state, token)
        if after is None:
            raise ValueError(f"token {token} cannot continue the tool call here; it was not in allowed(), "
                             "so mask the logits with allowed() before sampling")
        self.state = after
        self.call_bytes += self.grammar.token_bytes[token]
