"""A learner's own version of a course tool: the same job, written the way they would write it.

The course's tools are four fixed definitions. A model that only ever meets a weather question
beside ``get_weather`` can learn "weather needs get_weather" instead of "weather needs the tool
whose line says weather", and then tells a learner who wrote ``forecast(place)`` that it has no
weather tool (``data/experiments/learner_trial/``). The ``own_tool`` kind asks a weather, letters
or arithmetic question and offers a tool that does that job under another name, with other
parameter names, another description and, for the weather, other keys in its result; one time in
five the tool offered does another course job, and the answer says nothing offered fits.

Every pool has a training half and a held-out half, drawn by the conversation's tool split like
the generated tools' words (``toolgen``), so the ``unseen_phrasings_and_tools`` split asks for
names, parameters and descriptions no training conversation showed. The learner trial's own
tools (``forecast(place)``, ``add(a, b)``) are in neither half: they stay a test of their own.

``own_tool_open`` writes the tool with open words instead: a word that says the job
(``JOB_WORDS``) and around it words drawn as a generated tool's are (a pool, the corpus's words
or made up, ``toolgen``), parameters named the same way, a description from the generated tools'
frames. A model trained on a few fixed names can learn them by heart and treat any other tool as
no fit (``data/experiments/own_tools/``); here only the job word is a steady sign.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from llmkit.chat.tools import Tool
from llmkit.course.lookups import call_note
from llmkit.course.toolgen import TOOL_WORDS, skill_word
from llmkit.course.tools import get_weather
from llmkit.course.values import DAYS, draw

OWN_TOOL_JOBS = ("weather", "letters", "add", "subtract", "multiply")
REFUSAL_RATE = 0.2  # how often the tool offered does another job than the one asked for


@dataclass(frozen=True)
class Pool:
    """The training and the held-out half of one list of choices."""

    train: tuple
    heldout: tuple

    def pick(self, rng, split: str):
        return rng.choice(self.train if split == "train" else self.heldout)


# Names; each description pairs with the word of its first sentence that says the job (the thinking quotes it).
NAMES = {
    "weather": Pool(("weather_for", "get_forecast", "check_weather", "weather_report", "rain_outlook", "sky_report",
                     "lookup_weather", "city_weather", "outlook"),
                    ("predict_weather", "rain_or_shine", "meteo", "sky_outlook", "weather_lookup")),
    "letters": Pool(("letter_count", "occurrences", "char_count", "count_char", "letter_frequency", "how_many"),
                    ("tally_letter", "times_in_word", "glyph_count")),
    "add": Pool(("plus", "add_numbers", "sum_two", "addition", "add_up"), ("sum_of", "combine_numbers", "total")),
    "subtract": Pool(("minus", "subtract_numbers", "difference"), ("take_away", "diff_of")),
    "multiply": Pool(("times", "multiply_numbers", "product"), ("mult", "product_of")),
}
DESCRIPTIONS = {
    "weather": Pool((("Weather outlook for a town.", "weather"), ("Rain chance and temperature for one location.", "rain"),
                     ("Look up the forecast somewhere.", "forecast"), ("Returns the weather at a place.", "weather")),
                    (("Predicts sky and rain for a spot.", "rain"), ("Meteorological forecast, made up.", "forecast"))),
    "letters": Pool((("Count a character in some text.", "character"), ("How often a letter occurs.", "letter"),
                     ("Number of times a letter appears in a string.", "letter")),
                    (("Tallies one glyph in a word.", "glyph"), ("Occurrences of a single letter.", "letter"))),
    "add": Pool((("Add two numbers.", "add"), ("Returns the sum of two numbers.", "sum")),
                (("Sum of a pair of values.", "sum"), ("Adds one number to another.", "adds"))),
    "subtract": Pool((("Subtract one number from another.", "subtract"), ("The difference of two numbers.", "difference")),
                     (("Takes the second value away from the first.", "away"),)),
    "multiply": Pool((("Multiply two numbers.", "multiply"), ("Returns the product of two numbers.", "product")),
                     (("Product of a pair of values.", "product"),)),
}
PLACE_PARAMS = Pool(("location", "town", "where", "city_name", "place_name"), ("locale", "spot", "area"))
DAY_PARAMS = Pool(("when", "day_name", "which_day"), ("date", "period"))
TEXT_PARAMS = Pool(("text", "string", "word_text", "source"), ("phrase", "s"))
CHAR_PARAMS = Pool(("char", "character", "target", "symbol"), ("needle", "c"))
NUMBER_PARAMS = Pool((("x", "y"), ("first", "second"), ("left", "right"), ("m", "n"), ("num1", "num2")),
                     (("p", "q"), ("lhs", "rhs"), ("one", "two")))
RESULT_KEYS = {  # the weather's result under other keys: the answer must read them, not remember them
    "sky": Pool(("sky", "condition", "outlook", "conditions"), ("state", "looks")),
    "high": Pool(("high", "max_temp", "high_c", "temp_high"), ("warmest", "top_c")),
    "rain": Pool(("rain_percent", "chance_of_rain", "rain", "precip_chance"), ("wet_chance", "rain_odds")),
}
JOB_WORDS = {  # open tools: the word of the name (and description) that says the job
    "weather": Pool(("weather", "forecast", "rain", "outlook"), ("meteo", "sky")),
    "letters": Pool(("letter", "letters", "char", "character"), ("glyph", "symbol")),
    "add": Pool(("add", "sum", "plus"), ("total", "combine")),
    "subtract": Pool(("subtract", "minus", "difference"), ("deduct",)),
    "multiply": Pool(("multiply", "times", "product"), ("mult",)),
}
NEVER_OPEN = {"forecast", "add", "place", "a", "b"}  # the learner trial's names: no open tool is written with them
SYMBOLS = {"add": "+", "subtract": "-", "multiply": "*"}
FAMILY = {"weather": "weather", "letters": "letters", "add": "arithmetic", "subtract": "arithmetic",
          "multiply": "arithmetic"}  # the course tool each job stands in for
VERBAL_FORMS = {  # arithmetic asked in words, beside the arithmetic grammar's "{expression}" forms
    "add": Pool(("Add {x} and {y}.", "What is {x} plus {y}?", "Sum {x} and {y}.", "{x} plus {y}?"),
                ("Put {x} and {y} together, what do you get?", "Total of {x} and {y}?")),
    "subtract": Pool(("Subtract {y} from {x}.", "What is {x} minus {y}?", "{x} minus {y}?"),
                     ("Take {y} away from {x}.",)),
    "multiply": Pool(("Multiply {x} by {y}.", "What is {x} times {y}?", "{x} times {y}?"),
                     ("{x} multiplied by {y} makes what?",)),
}


@dataclass(frozen=True)
class OwnTool:
    """A learner-style tool for one course job: the ``Tool`` offered, and how its parameters map."""

    job: str
    tool: Tool
    params: tuple[str, ...]  # the job's inputs in order: (place[, day]), (text, char), (x, y)
    note: str  # the word of the tool's line the thinking quotes
    keys: dict[str, str] | None = None  # the weather result's keys: sky, high, rain -> this tool's key


def _schema(params: list[tuple[str, dict]]) -> dict:
    return {"type": "object", "properties": dict(params), "required": [name for name, spec in params
                                                                       if "default" not in spec],
            "additionalProperties": False}


def _open_word(rng, pool: Pool, split: str, taken: set[str]) -> str:
    """A word drawn as a generated tool's are (``pool``'s ``split`` half, the corpus, or made up),
    never the learner trial's, a fixed pool's held-out one, or one already ``taken``."""
    heldout = _flat_pools(pool for pool in (*NAMES.values(), PLACE_PARAMS, DAY_PARAMS, TEXT_PARAMS, CHAR_PARAMS,
                                            NUMBER_PARAMS)) if split == "train" else set()
    while True:
        word = skill_word(rng, _words_in_order(pool, split), split)
        if word not in NEVER_OPEN | heldout | taken | _flat_pools(JOB_WORDS.values()) | _flat_pools(JOB_WORDS.values(), "train"):
            return word


def _words_in_order(pool: Pool, split: str) -> list[str]:
    """``pool``'s ``split`` half as a list of words, in the pool's order (a set's order would change
    with Python's hash seed from one process to the next, and so would the draws)."""
    return list(dict.fromkeys(word for item in getattr(pool, split)
                              for word in (item if isinstance(item, tuple) else (item,))))


def _flat_pools(pools, split: str = "heldout") -> set[str]:
    """Every word of the ``split`` halves of ``pools``: what an open word must not be."""
    return {word for pool in pools for word in _words_in_order(pool, split)}


def _open_name_and_description(rng, job: str, split: str, first_param: str | None) -> tuple[str, str, str]:
    """An open tool's name around the job word, its description from the generated tools' frames, and the job word."""
    job_word = JOB_WORDS[job].pick(rng, split)
    while True:
        other = _open_word(rng, Pool(tuple(TOOL_WORDS["train"]["verbs"]), tuple(TOOL_WORDS["heldout"]["verbs"])),
                           split, set())
        name = rng.choice([f"{other}_{job_word}", f"{job_word}_{other}", job_word])
        if name not in NEVER_OPEN | _flat_pools(NAMES.values()) | _flat_pools(NAMES.values(), "train"):
            break
    frame = rng.choice(TOOL_WORDS[split]["descriptions"])
    return name, frame.format(subject=job_word, param=(first_param or "request").replace("_", " ")), job_word


def make_own_tool(rng, job: str, split: str, open_words: bool = False) -> OwnTool:
    """A tool for ``job`` (one of ``OWN_TOOL_JOBS``) with its name, parameters and description from
    ``split``'s pools, or with ``open_words`` drawn openly around a job word (``own_tool_open``)."""
    def pick(pool: Pool, taken: frozenset = frozenset()):
        return _open_word(rng, pool, split, set(taken)) if open_words else pool.pick(rng, split)
    own = _own_tool(rng, job, split, pick, open_words)
    if not open_words:
        return own
    name, description, note = _open_name_and_description(rng, job, split, own.params[0])
    tool = Tool(own.tool.function, name=name, description=description, input_schema=own.tool.input_schema)
    return OwnTool(job, tool, own.params, note, own.keys)


def _own_tool(rng, job: str, split: str, pick, open_words: bool) -> OwnTool:
    name = NAMES[job].pick(rng, split)
    description, note = DESCRIPTIONS[job].pick(rng, split)
    if job == "weather":
        place = pick(PLACE_PARAMS)
        day = pick(DAY_PARAMS, {place}) if rng.random() < 0.5 else None
        keys = {role: pool.pick(rng, split) for role, pool in RESULT_KEYS.items()}
        shown = [k for k in ("sky", "high", "rain") if k != "rain" or rng.random() < 0.5]

        def run(**given):
            real = get_weather.function(given[place], given.get(day, "today") if day else "today")
            values = {"sky": real["condition"], "high": real["high_c"], "rain": real["chance_of_rain_percent"]}
            return {keys[k]: values[k] for k in shown}
        specs = [(place, {"type": "string"})]
        if day:
            specs.append((day, {"type": "string", "enum": list(DAYS), "default": "today"}))
        tool = Tool(run, name=name, description=description, input_schema=_schema(specs))
        return OwnTool(job, tool, (place, day) if day else (place,), note, {k: keys[k] for k in shown})
    if job == "letters":
        text = pick(TEXT_PARAMS)
        char = pick(CHAR_PARAMS, {text})

        def run(**given):
            return sum(1 for c in given[text] if c.casefold() == given[char].casefold())
        specs = [(text, {"type": "string"}), (char, {"type": "string"})]
        return OwnTool(job, Tool(run, name=name, description=description, input_schema=_schema(specs)),
                       (text, char), note)
    x, y = NUMBER_PARAMS.pick(rng, split)
    if open_words:
        x = pick(Pool(tuple(p for p, _ in NUMBER_PARAMS.train), tuple(p for p, _ in NUMBER_PARAMS.heldout)))
        y = pick(Pool(tuple(q for _, q in NUMBER_PARAMS.train), tuple(q for _, q in NUMBER_PARAMS.heldout)), {x})
    kind = rng.choice(["integer", "number"])

    def run(**given):
        a, b = given[x], given[y]
        return a + b if job == "add" else a - b if job == "subtract" else a * b
    specs = [(x, {"type": kind}), (y, {"type": kind})]
    return OwnTool(job, Tool(run, name=name, description=description, input_schema=_schema(specs)), (x, y), note)


def _note(own: OwnTool) -> str:
    return call_note(own.tool, own.note)  # checks that the word is on the tool's line


def own_tool_request(b, own: OwnTool):
    """The user's request for ``own``'s job, in the course grammar's words, and how to answer it."""
    from llmkit.course.skills import UMBRELLA_FROM_PERCENT, Request

    if own.job == "weather":
        city, day = draw(b.rng, "city", b.value_split), b.rng.choice(DAYS)
        tool_input = {own.params[0]: city, **({own.params[1]: day} if len(own.params) > 1 else {})}
        role = "rain" if "rain" in own.keys and b.rng.random() < 0.5 else "high"

        def answer(content: str) -> str:
            result = json.loads(content)
            got = {part: result[key] for part, key in own.keys.items()}
            if role == "rain":
                umbrella = got["rain"] >= UMBRELLA_FROM_PERCENT
                return f"{'Yes, take an umbrella' if umbrella else 'No umbrella needed'}: {got['rain']}% chance of rain."
            return f"{str(got['sky']).capitalize()} in {city}, high {got['high']}°C."
        return Request(b.say("weather", city=city, day=day), own.tool, tool_input, (own.keys[role],), answer, _note(own))
    if own.job == "letters":
        word = draw(b.rng, "word", b.value_split)
        letter = b.rng.choice(sorted(set(word)))

        def answer(content: str) -> str:
            count = int(content)
            return f"{word} has {count} {letter if count == 1 else letter + chr(39) + 's'}."
        return Request(b.say("letters", letter=letter, word=word), own.tool, dict(zip(own.params, (word, letter))),
                       (), answer, _note(own))
    x, y = (draw(b.rng, "integer", b.value_split) for _ in range(2))
    if b.rng.random() < 0.5:
        text = b.say("arithmetic", form=VERBAL_FORMS[own.job].pick(b.rng, b.phrasing), x=x, y=y)
    else:
        text = b.say("arithmetic", expression=f"{x} {SYMBOLS[own.job]} {y}")
    return Request(text, own.tool, dict(zip(own.params, (x, y))), (),
                   lambda content: b.rng.choice([f"The result is {content}.", f"That makes {content}."]), _note(own))


def own_tool_conversation(b, open_words: bool = False):
    """The ``own_tool`` kind: a course question beside a learner-style tool for it (or, one time in
    five, for another job: then the answer says no offered tool fits), among generated distractors;
    ``own_tool_open`` with ``open_words``."""
    from llmkit.course.skills import COURSE_SUBJECTS, SYSTEM_PROMPTS, SkillConversation, _answer_requests, _refusal

    job = b.rng.choice(OWN_TOOL_JOBS)
    own = make_own_tool(b.rng, job, b.tool_split, open_words)
    kind = "own_tool_open" if open_words else "own_tool"
    request = own_tool_request(b, own)
    if b.rng.random() < REFUSAL_RATE:
        other_jobs = [j for j in OWN_TOOL_JOBS if FAMILY[j] != FAMILY[job]]
        other = make_own_tool(b.rng, b.rng.choice(other_jobs), b.tool_split, open_words)
        offered = [other.tool, *b.distractors(b.rng.randint(0, 2), {other.tool.name}, course=False)]
        b.rng.shuffle(offered)
        return _refusal(b, kind, request.text, COURSE_SUBJECTS[FAMILY[job]], offered)
    offered = [own.tool, *b.distractors(b.rng.randint(0, 3), {own.tool.name}, course=False)]
    b.rng.shuffle(offered)
    messages, expected = _answer_requests(b, [request], request.text, offered)
    return SkillConversation(kind, b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS), expected)
