"""Structured text for pretraining and for the tokenizer: JSON records, code, lists, dialogues.

A model pretrained on Shakespeare alone has never had to copy a span exactly: plays repeat few
strings verbatim. Yet a tool call is copying (the tool's name from its definition, the city from
the question) and an answer is copying (a value from the result). Text in which a later span
repeats an earlier one, token for token, builds the attention heads that copy ("induction
heads") during pretraining, before fine-tuning asks for them. And a tokenizer that has seen
snake_case names, JSON and code cuts them into fewer pieces: fewer chances to miscopy.

Every document here is generated offline from our own generators (``toolgen``, ``values``,
``skills``), seeded, with invented values, so copying is the only way to predict the repeats.
"""
from __future__ import annotations

import json
import random

from llmkit.chat.template import tool_line
from llmkit.course.skills import make_skill
from llmkit.course.toolgen import draw_arguments, make_tool
from llmkit.course.values import draw

GENERATORS = ("records", "code", "repeat", "dialogue")


def records(rng: random.Random, split: str = "train") -> str:
    """A few JSON records, then one looked up again by its name: the lookup copies the record."""
    rows = [{"name": draw(rng, "name", split), "city": draw(rng, "city", split), "code": draw(rng, "code", split),
             "count": draw(rng, "integer", split), "score": draw(rng, "number", split)} for _ in range(rng.randint(2, 6))]
    if rng.random() < 0.3:
        rows = {"items": rows, "total": len(rows)}
    text = json.dumps(rows, indent=rng.choice([None, 2]), ensure_ascii=False)
    pick = rng.choice(rows["items"] if isinstance(rows, dict) else rows)
    return f"{text}\nlookup {pick['name']}: {json.dumps(pick, ensure_ascii=False)}\n"


def code(rng: random.Random, split: str = "train") -> str:
    """A Python function for a generated tool, a call of it with values, and the value it returns."""
    tool = make_tool(rng, split)
    types = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "enum": "str"}
    params = ", ".join(f"{p.name}: {types[p.type]}" for p in tool.params)
    arguments = draw_arguments(rng, tool, split)
    call = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return (f"def {tool.name}({params}) -> dict:\n    \"\"\"{tool.description}\"\"\"\n    ...\n\n"
            f"# {tool_line(tool.definition())}\n>>> {tool.name}({call})\n{json.dumps(tool.result(arguments))}\n")


def repeat(rng: random.Random, split: str = "train") -> str:
    """A list of values said twice: the second time is pure copying."""
    items = [str(draw(rng, rng.choice(["name", "city", "word", "code", "integer"]), split))
             for _ in range(rng.randint(3, 10))]
    joiner = rng.choice([" ", ", ", "\n- "])
    return f"List: {joiner.join(items)}\nAgain: {joiner.join(items)}\n"


def dialogue(rng: random.Random, split: str = "train") -> str:
    """A skill conversation as plain text (no control tokens): modern English with tools in it."""
    conversation = make_skill(rng.choice(["tool", "weather", "letters", "memory", "multi", "missing"]),
                              "train" if split == "train" else "unseen_values",
                              rng.randrange(10**9), invent_every_word=False)  # the text the recipe's corpus was built from
    lines = [f"Tool: {tool_line(t.definition())}" for t in conversation.tools]
    for message in conversation.messages:
        blocks = message["content"] if isinstance(message["content"], list) else [
            {"type": "text", "text": message["content"]}]
        for block in blocks:
            if block["type"] == "text":
                lines.append(f"{message['role'].capitalize()}: {block['text']}")
            elif block["type"] in ("tool_use", "server_tool_use"):
                lines.append(f"Call: {json.dumps({'name': block['name'], 'input': block['input']})}")
            elif block["type"] in ("tool_result", "server_tool_result"):
                lines.append(f"Result: {block['content']}")
    return "\n".join(lines) + "\n"


def documents(n: int, *, seed: int, split: str = "train", kinds=GENERATORS) -> list[str]:
    """``n`` generated documents, the kinds taking turns."""
    rng = random.Random(f"llmkit-structured|{split}|{seed}")
    makers = {"records": records, "code": code, "repeat": repeat, "dialogue": dialogue}
    return [makers[kinds[i % len(kinds)]](rng, split) for i in range(n)]
