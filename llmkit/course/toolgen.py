"""Tools invented per example: new names, parameters, descriptions and results every time.

Trained on three fixed tools, a model learns *those* tools: it calls ``get_weather`` from memory
and, offered a learner's ``forecast(place)``, says it has no weather tool. To teach the skill
(read the tool lines in the context, pick the one whose name and description fit the request,
copy the argument values from the user's words, answer from the result's values) every
conversation here offers tools made up on the spot:

- a snake_case name from a word list (``check_tide_level``, ``parcel_delay``), sometimes with an
  invented word in it (``check_plimbo_level``), so a name can only be copied, never remembered;
  with ``invent_every_word`` (the skill conversations) every word of the name and of the string
  and number parameters' names comes a third of the time from the pools below, a third from
  9,000 words of the corpus (``tool_vocabulary``) and a third is made up, so that nothing in a
  definition can be remembered instead of read (from 9 pool verbs a model learned to guess one,
  and from 30 domains which words start a name);
- 0-3 parameters with varied names (``harbor``, ``target_city``, ``include_history``) and types
  (string, integer, number, boolean, enum);
- a description in varied wording; a result that is a JSON object with varied keys, sometimes
  nested, whose values are a pure function of the arguments (a real tool that ``run_tool_call``
  runs, so evaluations run it too).

``TOOL_WORDS["train"]`` and ``TOOL_WORDS["heldout"]`` share no word, and the corpus words are
split between them by the values' hash (``VOCABULARY``): held-out tools have names, parameter
names, descriptions and result keys that training never showed.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from llmkit.chat.tools import Tool
from llmkit.course import tool_vocabulary
from llmkit.course.values import draw, invented_word, value_split

TOOL_SPLITS = ("train", "heldout")
TYPES = ("string", "integer", "number", "boolean", "enum")
INVENTED_WORD_RATE = 0.25  # how often a corpus document's tool has a made-up domain word
SKILL_WORD_SOURCES = ("pool", "vocabulary", "invented")  # where a skill tool's words come from, a third each
BOOLEAN_WORDS = frozenset({"yes", "no", "true", "false"})  # how a user says a boolean: never an enum's option

TOOL_WORDS = {
    "train": {
        "verbs": ["get", "fetch", "lookup", "find", "check", "read", "query", "load", "list"],
        "domains": ["tide", "ticket", "order", "parcel", "flight", "garden", "library", "train", "battery", "invoice",
                    "recipe", "planet", "river", "museum", "hotel", "crop", "bus", "stock", "server", "account",
                    "concert", "school", "bridge", "forest", "pollen", "traffic", "bike", "movie", "coffee", "team"],
        "measures": ["level", "status", "count", "price", "score", "rating", "temperature", "delay", "balance",
                     "size", "speed", "age", "distance", "schedule", "owner", "forecast", "total", "limit"],
        "string": {"city": ["city", "town", "location", "region"], "name": ["user", "owner", "customer", "author"],
                   "code": ["ticket_id", "order_code", "sku", "ref"], "word": ["topic", "keyword", "label", "title"],
                   "date": ["date", "day_label"]},
        "integer": ["count", "limit", "days", "year", "floor", "quantity"],
        "number": ["amount", "weight", "price", "ratio", "radius"],
        "boolean": ["include_history", "verbose", "detailed", "archived", "express"],
        "enum": {"unit": ["celsius", "fahrenheit"], "mode": ["fast", "slow"], "level": ["low", "medium", "high"],
                 "format": ["short", "long"], "currency": ["usd", "eur", "inr"]},
        "modifiers": ["target", "home", "main"],
        "descriptions": ["Get the {subject} for a {param}.", "Returns the current {subject}.",
                         "Looks up the {subject} of the given {param}.", "Use this to find the {subject}.",
                         "Fetches {subject} data for one {param}.", "Tells you the {subject}."],
        "keys": ["value", "result", "amount", "status", "reading", "total", "unit", "updated", "source", "data",
                 "info", "details", "note"],
    },
    "heldout": {
        "verbs": ["pull", "retrieve", "obtain", "grab", "show", "seek"],
        "domains": ["volcano", "glacier", "tram", "lighthouse", "orchard", "bakery", "satellite", "ferry",
                    "reservoir", "harbor", "vineyard", "stadium", "pharmacy", "quarry"],
        "measures": ["depth", "yield", "quota", "tally", "backlog", "capacity", "fee", "ranking", "elevation"],
        "string": {"city": ["port", "venue", "district", "site"], "name": ["member", "patient", "driver", "guest"],
                   "code": ["serial", "reservation", "batch_number", "tag"], "word": ["theme", "phrase", "category"],
                   "date": ["when"]},
        "integer": ["nights", "seats", "rank", "week", "pages"],
        "number": ["budget", "height", "rate", "volume"],
        "boolean": ["with_photos", "urgent", "refundable", "public"],
        "enum": {"portion": ["small", "large"], "gear": ["eco", "turbo"], "tier": ["basic", "gold", "platinum"],
                 "style": ["plain", "fancy"]},
        "modifiers": ["source", "primary"],
        "descriptions": ["Reports the {subject} whenever asked.", "Provides {subject} information on request.",
                         "Gives back a {subject} reading per {param}.", "Answers with the {subject}.",
                         "Computes the {subject} from a {param}."],
        "keys": ["figure", "outcome", "measure", "payload", "record", "stamp", "origin", "meta", "body", "entry"],
    },
}


@dataclass(frozen=True)
class Param:
    """One parameter: its name, JSON type, the value kind drawn for it, how a user says its name
    (``words``), and its options when it is an enum."""

    name: str
    type: str
    kind: str
    words: str
    options: tuple[str, ...] = ()

    def schema(self) -> dict:
        if self.type == "enum":
            return {"type": "string", "enum": list(self.options), "description": f"The {self.words}."}
        return {"type": self.type, "description": f"The {self.words}."}


@dataclass(frozen=True)
class GenTool:
    """A generated tool: ``definition()`` is what the model reads, ``as_tool()`` is what the harness runs."""

    name: str
    subject: str
    description: str
    params: tuple[Param, ...]
    keys: tuple[str, ...]  # result keys: the answer's key first
    nest: str | None  # the answer sits in {nest: {...}} when set
    value_kind: str  # what the answer value is: integer, number, word, code, date
    value_split: str

    def definition(self) -> dict:
        schema = {"type": "object", "properties": {p.name: p.schema() for p in self.params},
                  "required": [p.name for p in self.params], "additionalProperties": False}
        return {"name": self.name, "description": self.description, "input_schema": schema}

    def result(self, arguments: dict) -> dict:
        """The JSON object the tool returns: a pure function of its name and arguments."""
        seed = hashlib.sha256(f"{self.name}|{json.dumps(arguments, sort_keys=True)}".encode()).hexdigest()
        rng = random.Random(seed)
        answer = draw(rng, self.value_kind, self.value_split)
        extra = {key: draw(rng, rng.choice(["integer", "word", "code"]), self.value_split) for key in self.keys[1:]}
        inner = {self.keys[0]: answer, **extra}
        return {self.nest: inner, "ok": True} if self.nest else inner

    def answer_value(self, arguments: dict):
        """The value a correct answer must quote."""
        result = self.result(arguments)
        return (result[self.nest] if self.nest else result)[self.keys[0]]

    def as_tool(self) -> Tool:
        def run(**arguments):
            return self.result(arguments)
        return Tool(run, name=self.name, description=self.description, input_schema=self.definition()["input_schema"])


def check_tool_split(split: str) -> str:
    if split not in TOOL_SPLITS:
        raise ValueError(f"tool split must be 'train' or 'heldout', got {split!r}")
    return split


def _word(rng: random.Random, pool: list[str], split: str, rate: float = INVENTED_WORD_RATE,
          unlike_pools: bool = False) -> str:
    """A word from ``pool`` or, with probability ``rate``, a made-up one (``unlike_pools``: never a
    word of either split's pools, which the made-up syllables can spell by chance, like "year")."""
    if rng.random() >= rate:
        return rng.choice(pool)
    while True:
        word = invented_word(rng, split, (1, 3))
        if not unlike_pools or word not in _ALL_POOL_WORDS:
            return word


def skill_word(rng: random.Random, pool: list[str], split: str) -> str:
    """A word of a skill conversation's tool: from ``pool``, from ``split``'s corpus words, or made
    up, each a third of the time."""
    source = rng.choice(SKILL_WORD_SOURCES)
    if source == "pool":
        return rng.choice(pool)
    if source == "vocabulary":
        return rng.choice(VOCABULARY[split])
    return _word(rng, pool, split, 1.0, unlike_pools=True)


def chatter_word(rng: random.Random, split: str) -> str:
    """A noun for talk around a request, drawn as a skill tool's domain word is (pool, corpus or
    made up), so that an unfamiliar word in a request is no sign that it is the one to copy."""
    return skill_word(rng, TOOL_WORDS[check_tool_split(split)]["domains"], split)


def enum_options(rng: random.Random, split: str) -> tuple[str, ...]:
    """2-4 different options for an enum, each drawn like a skill tool's word (``skill_word``):
    from the split's fixed options, its corpus words, or made up. Never yes/no/true/false, which
    a user says for a boolean, nor another split's fixed option (the corpus words hold "plain")."""
    pool = [option for options in TOOL_WORDS[split]["enum"].values() for option in options]
    others = {o for other in TOOL_SPLITS if other != split for opts in TOOL_WORDS[other]["enum"].values() for o in opts}
    options: list[str] = []
    for _ in range(rng.choice((2, 3, 3, 4))):
        while (option := skill_word(rng, pool, split)) in options or option in BOOLEAN_WORDS | others:
            pass
        options.append(option)
    return tuple(options)


def make_param(rng: random.Random, split: str, taken: set[str], invent_every_word: bool = False,
               open_enums: bool = False) -> Param:
    """One parameter of a random type whose name is not in ``taken``; with ``invent_every_word`` a
    string or number parameter's name is drawn like a skill tool's words (``skill_word``), and
    with ``open_enums`` an enum's or boolean's name too, and an enum's options (``enum_options``):
    trained on a dozen fixed options, a model writes them from memory and cannot copy a new one."""
    words = TOOL_WORDS[split]
    while True:
        kind_of_type = rng.choice(TYPES)
        if kind_of_type == "string":
            kind = rng.choice(sorted(words["string"]))
            base, options = rng.choice(words["string"][kind]), ()
        elif kind_of_type == "enum":
            base = rng.choice(sorted(words["enum"]))
            kind, options = "enum", tuple(words["enum"][base])
        else:
            base, kind, options = rng.choice(words[kind_of_type]), kind_of_type, ()
        if invent_every_word and (open_enums or kind_of_type not in ("enum", "boolean")):
            base = skill_word(rng, [base], split)
        if open_enums and kind_of_type == "enum":
            options = enum_options(rng, split)
        name = f"{rng.choice(words['modifiers'])}_{base}" if rng.random() < 0.2 else base
        if name not in taken:
            return Param(name, kind_of_type, kind, name.replace("_", " "), options)


def make_tool(rng: random.Random, split: str, value_split: str | None = None, *, avoid: set[str] = frozenset(),
              params: int | None = None, invent_every_word: bool = False, open_enums: bool = False) -> GenTool:
    """A new tool from ``split``'s word pools whose subject's first word is not in ``avoid``.

    Without ``invent_every_word`` (the pretraining corpus's documents, whose text must not change
    under a recipe already run) only the domain word is sometimes invented. ``open_enums``: see
    ``make_param``.
    """
    words = TOOL_WORDS[check_tool_split(split)]

    def name_word(pool: list[str]) -> str:
        return skill_word(rng, pool, split) if invent_every_word else rng.choice(pool)

    while True:
        domain = skill_word(rng, words["domains"], split) if invent_every_word else _word(rng, words["domains"], split)
        if domain not in avoid:
            break
    measure = name_word(words["measures"])
    verb = name_word(words["verbs"])
    name = rng.choice([f"{verb}_{domain}_{measure}", f"{domain}_{measure}", f"{verb}_{domain}_{measure}"])
    n_params = rng.choice([0, 1, 1, 2, 2, 3]) if params is None else params
    chosen: list[Param] = []
    for _ in range(n_params):
        chosen.append(make_param(rng, split, {p.name for p in chosen}, invent_every_word, open_enums))
    subject = f"{domain} {measure}"
    about = chosen[0].words if chosen else "request"
    description = rng.choice(words["descriptions"]).format(subject=subject, param=about)
    keys = tuple(rng.sample(words["keys"], rng.randint(1, 3)))
    nest = rng.choice([None, None, rng.choice(words["keys"])])
    nest = None if nest in keys else nest
    return GenTool(name, subject, description, tuple(chosen), keys, nest,
                   rng.choice(["integer", "number", "word", "code", "date"]), value_split or split)


def draw_arguments(rng: random.Random, tool: GenTool, value_split: str) -> dict:
    """Values for every parameter, drawn from ``value_split``'s pools (or the enum's options)."""
    arguments = {}
    for p in tool.params:
        if p.type == "boolean":
            arguments[p.name] = rng.random() < 0.5
        elif p.type == "enum":
            arguments[p.name] = rng.choice(p.options)
        else:
            arguments[p.name] = draw(rng, p.kind, value_split)
    return arguments


def spoken(value) -> str:
    """How a user writes a value: booleans as yes/no, numbers as Python writes them."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def say_arguments(rng: random.Random, tool: GenTool, arguments: dict, styles: list[str], joiners: list[str]) -> str:
    """The user's words for the arguments, in a random order and style: "city Oslo and days 3"."""
    parts = [rng.choice(styles).format(words=p.words, value=spoken(arguments[p.name])) for p in tool.params]
    rng.shuffle(parts)
    joiner = rng.choice(joiners)
    return joiner.join(parts)


def pool_words(split: str) -> set[str]:
    """Every word a tool of ``split`` can be named, parametrised or described with (from the pools)."""
    words = TOOL_WORDS[check_tool_split(split)]
    found = set(words["verbs"]) | set(words["domains"]) | set(words["measures"]) | set(words["modifiers"])
    found |= {w for names in words["string"].values() for n in names for w in n.split("_")}
    found |= {w for key in ("integer", "number", "boolean") for n in words[key] for w in n.split("_")}
    found |= {w for n in words["enum"] for w in n.split("_")}
    return found


_ALL_POOL_WORDS = pool_words("train") | pool_words("heldout")
VOCABULARY = {split: [w for w in tool_vocabulary.WORDS if value_split(w) == split and w not in _ALL_POOL_WORDS]
              for split in TOOL_SPLITS}
"""The corpus words a skill tool's name can use, by split: the values' hash decides, and no name
word of either split's pools is among them. The pools' enum options can be (four held-out
options, "fancy", "gold", "plain", "small", are training corpus words), so ``enum_options`` leaves
the other split's options out."""


def value_at(result, path: tuple[str, ...]):
    """The value at ``path`` in a parsed result; ``("*first*",)`` is the first value of an object."""
    for key in path:
        result = next(iter(result.values())) if key == "*first*" else result[key]
    return result
