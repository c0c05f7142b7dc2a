"""Choosing a tool call's argument values whole, among the values the conversation holds.

Decoding token by token commits to a value's first token, then to each next one, without looking
ahead. A small model that has found the right place to copy from can still lose a long value on
the way: asked to "Dig up notes on best time to visit Tunis.", the course's chat model writes the
query "best time to visit count". The tool-name choice already asks the better question
(``llmkit.generation.choice``), and here it is asked of values: of the values the conversation
holds, which one does the model find most likely as a *whole*? Each option ends with the comma or
brace that closes the value, so a span that stops a word early must still make the model end the
value there. Chosen whole, the query is "best time to visit Tunis".

It is an extractive constraint, like the span pointers of reading-comprehension models: the model
still decides which value, and it can no longer write one that nobody said. That is also its
limit, so it is a choice the caller makes (``constrain_tools="copy"``), not the default: a value
the user implied but never wrote ("the French capital" for Paris) cannot be chosen. Nor can it fix
a model that ranks the wrong word first: that is reading, not copying
(``data/experiments/value_copy/`` measures both).

    sources     the text a value may be copied from: what the user typed and what tools returned
    spans       a string's candidates: every run of 1 to ``LONGEST_SPAN`` words of it, with and
                without the punctuation around it ("(3 + 4) * 2" keeps its brackets; "satellite."
                also offers "satellite")
    ValueChoice a number's candidates are the numbers in the text, an ``enum``'s or a boolean's
                its options; it turns each into the tokens a whole call would have
"""
from __future__ import annotations

import json
import re
from typing import Iterable

LONGEST_SPAN = 6  # words; longer values are rare, and every span is a row the model must score
MOST_SPANS = 256  # per request: the latest text first, so a long history cannot blow up the scoring
EDGE_PUNCTUATION = ".,!?;:\"'()[]{}"
POSSESSIVE = re.compile(r"^(.+?)['\u2019][sS]$")  # "r's" -> "r": how letters are asked about


def sources(messages: list[dict]) -> list[str]:
    """The texts of ``messages`` a value may be copied from, oldest first: every user text block
    and every tool result (its text; JSON results also give their string and number leaves)."""
    texts: list[str] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            if message["role"] == "user":
                texts.append(content)
            continue
        for block in content:
            if block.get("type") == "text" and message["role"] == "user":
                texts.append(block["text"])
            elif block.get("type") in ("tool_result", "server_tool_result"):
                texts.extend(_result_texts(block.get("content")))
    return texts


def _result_texts(content) -> list[str]:
    if isinstance(content, list):
        return [text for block in content if isinstance(block, dict) for text in _result_texts(block.get("text"))]
    if not isinstance(content, str):
        return []
    try:
        parsed = json.loads(content)
    except ValueError:
        return [content]
    leaves: list[str] = []
    _collect_leaves(parsed, leaves)
    return leaves


def _collect_leaves(value, leaves: list[str]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _collect_leaves(item, leaves)
    elif isinstance(value, list):
        for item in value:
            _collect_leaves(item, leaves)
    elif isinstance(value, str):
        leaves.append(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        leaves.append(str(value))


def spans(texts: Iterable[str], longest: int = LONGEST_SPAN, most: int = MOST_SPANS) -> list[str]:
    """The candidate values: every run of 1..``longest`` words of each text, as written and with
    the punctuation at its edges stripped, and a possessive's word alone ("l's" -> "l"). The
    latest text's spans come first; at most ``most`` distinct spans in all."""
    found: dict[str, None] = {}
    for text in reversed(list(texts)):
        words = text.split()
        for start in range(len(words)):
            for end in range(start + 1, min(len(words), start + longest) + 1):
                run = " ".join(words[start:end])
                for candidate in (run, run.strip(EDGE_PUNCTUATION), run.rstrip(".,!?;:")):
                    if candidate:
                        found.setdefault(candidate)
            possessive = POSSESSIVE.match(words[start].strip(EDGE_PUNCTUATION))
            if possessive:
                found.setdefault(possessive.group(1))
            if len(found) >= most:
                return list(found)[:most]
    return list(found)


VALUE_START = re.compile(rb'^\{"name": ("(?:[^"\\]|\\.)*"), "input": \{(?:.*, )?("(?:[^"\\]|\\.)*"):$', re.DOTALL)
ESCAPED = re.compile(rb"\\.")
CLOSINGS = (b",", b"}")  # another argument follows, or the arguments end
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def value_start(call: bytes) -> tuple[str, str] | None:
    """(tool name, parameter) where ``call`` (a call's JSON so far) has just written a top-level
    parameter's name and its colon, so its value comes next; None anywhere else."""
    match = VALUE_START.match(call)
    if match is None or ESCAPED.sub(b"", call).count(b'"') % 2 == 1:
        return None  # an odd count of unescaped quotes: inside a string, where '"key":' is only text
    return json.loads(match.group(1)), json.loads(match.group(2))


class ValueChoice:
    """The options for one request's argument values: each candidate value's tokens as the chat
    template writes them in a whole call, from the space after the parameter's colon to the comma
    or brace that ends the value (``CLOSINGS``), for the values the call's grammar accepts there."""

    def __init__(self, tokenizer, definitions: list[dict], copy_from: list[str]):
        self.tokenizer = tokenizer
        self.properties = {d["name"]: d["input_schema"].get("properties", {}) for d in definitions}
        self.spans = spans(copy_from)
        numbers = dict.fromkeys(match for text in reversed(copy_from) for match in NUMBER.findall(text))
        self.numbers = [json.loads(n) for n in numbers if _plain_number(n)]
        self._tokens: dict[bytes, list[int] | None] = {}

    def candidates(self, schema: dict) -> list:
        """What a parameter's value may be: an ``enum``'s options; for a string, the conversation's
        spans; for a number, the numbers in it (whole ones for an integer); for a boolean, both."""
        if "enum" in schema:
            return list(schema["enum"])
        kind = schema.get("type")
        if kind == "string":
            return self.spans
        if kind in ("integer", "number"):
            return [n for n in self.numbers if kind == "number" or isinstance(n, int)]
        return [True, False] if kind == "boolean" else []

    def options(self, call: bytes, state, grammar) -> list[list[int]]:
        """The options at this point of a call: none unless a top-level parameter's value comes next."""
        where = value_start(call)
        if where is None:
            return []
        options = []
        for value in self.candidates(self.properties.get(where[0], {}).get(where[1], {})):
            for closing in CLOSINGS:
                data = b" " + json.dumps(value, ensure_ascii=False).encode() + closing
                tokens = self._value_tokens(data)
                if tokens is not None and grammar.matcher.read(data, state) is not None:
                    options.append(tokens)
        return options

    def _value_tokens(self, data: bytes) -> list[int] | None:
        """The tokens of `` <value>,`` or `` <value>}`` as a whole call has them; None when the value's
        last token would also hold the comma or brace in some other way than the template writes it."""
        if data not in self._tokens:
            ids = self.tokenizer.encode(data.decode())
            pieces = [self.tokenizer.token_bytes(i) for i in ids]
            ends_clean = pieces[-1] in (b",", b"}", b'",')  # the template's own tokens for a value's end
            self._tokens[data] = ids if len(ids) > 1 and ends_clean else None
        return self._tokens[data]


def _plain_number(text: str) -> bool:
    """A number JSON writes back the same way: "007" or "1.50" would come back as 7 or 1.5."""
    try:
        return json.dumps(json.loads(text)) == text
    except ValueError:  # "007": JSON has no leading zeros
        return False
