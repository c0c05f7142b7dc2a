"""Conversations that teach skills, not sentences, with held-out splits built in.

Every conversation is composed: the request from a grammar (``llmkit.course.phrasing``), the
tools from a generator (``llmkit.course.toolgen``, plus the course's own tools as a small share),
the values from large pools and invented ones (``llmkit.course.values``). The kinds:

- tool:       a generated tool among 1-5 offered: call it with the user's values, answer from its result
- weather, letters, arithmetic, search: the course tools, asked in many words, beside distractors
- missing:    the request needs a tool that is not offered: say so, invent no number
- memory:     an introduction, maybe some chat, then "what's my name?" (only the history knows)
- chitchat:   greetings, thanks, questions about the assistant: answer without a tool, tools or not
- multi:      two requests in one message: two calls one after the other, then one answer
- errands:    one list of 3-4 generated tools, then 2-3 requests in turn, each for a different tool:
              the same context asks for different names, so only reading the list gets them right
- which:      3-5 things asked at once: name the tool for each, call none (not in the default mix)
- not_offered: a weather, letters, arithmetic or search request with its tool left out: say so
              (not in the default mix; a recipe's ``mix`` may add it)
- own_tool:   a weather, letters or arithmetic request beside a learner-style tool for it: another
              name, other parameters, another description (``llmkit.course.own_tools``; not in the
              default mix); own_tool_open: the same with open words around a word that says the job
- memory_open: memory whose introduction is open words around the name, so only the name's
              capital and the reply's greeting mark it (``open_talk.open_introduction``; not in the default mix)

Splits and the conversation type: ``llmkit.course.skill_conversation``. Every reply ends its turn.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Callable

from llmkit.chat.tools import Tool, run_tool_call
from llmkit.course.lookups import call_note, lookup_note
from llmkit.course.open_framing import OPEN_RATE, open_argument_styles, open_form, open_joiners, tool_words
from llmkit.course.open_forms import OPEN_FORMS_RATE, open_form_words, value_words
from llmkit.course.open_talk import OPEN_TALK_RATE, open_introduction, talk_maker
from llmkit.course.own_tools import own_tool_conversation
from llmkit.course.phrasing import fill, template
from llmkit.course.phrasing_pools import CHITCHAT_ANSWERS, HELDOUT, PLAYS, TRAIN
from llmkit.course.skill_conversation import (EVAL_SPLITS, SPLIT_SOURCES, SPLITS, Expected,  # noqa: F401 (re-exported)
                                              SkillConversation, splits_of)
from llmkit.course.toolgen import GenTool, chatter_word, draw_arguments, make_tool, say_arguments, value_at
from llmkit.course.tools import calculator, count_letters, get_weather, web_search
from llmkit.course.values import DAYS, draw

KINDS = ("tool", "weather", "letters", "arithmetic", "search", "missing", "memory", "chitchat", "multi", "errands", "which",
         "not_offered", "own_tool", "own_tool_open", "memory_open")
MIX = {"tool": 24, "errands": 24, "multi": 10, "missing": 8, "memory": 8, "chitchat": 5, "weather": 6,
       "letters": 5, "arithmetic": 5, "search": 5}  # training shares; no ``which``: it cost held-out calls (recipe README)
COURSE_TOOLS = {"weather": get_weather, "letters": count_letters, "arithmetic": calculator, "search": web_search}
COURSE_SUBJECTS = {"weather": "weather forecast", "letters": "letter count", "arithmetic": "calculation",
                   "search": "search results"}  # what a refusal says is missing when a course tool is left out
SYSTEM_PROMPTS = [None, "You are a helpful assistant.", "You are a helpful assistant. Answer briefly.",
                  "Use a tool when one fits; otherwise answer directly."]
UMBRELLA_FROM_PERCENT = 50


def _subject_of(name: str) -> str:
    """The last two words of a tool name, which for a generated tool are its subject (``tide_level``)."""
    return "_".join(name.split("_")[-2:])


class _Builder:
    """The state one conversation is built with: its random stream and its three splits."""

    def __init__(self, rng: random.Random, split: str, invent_every_word: bool = True, wider: bool = False,
                 open_framing: bool = False, open_enums: bool = False, open_talk: bool = False,
                 open_forms: bool = False):
        self.rng, self.split, self.invent_every_word, self.wider, self.calls = rng, split, invent_every_word, wider, 0
        self.open_framing, self.open_enums = open_framing, open_enums
        self.phrasing, self.tool_split, self.value_split = splits_of(split)
        self.open_talk = open_talk and self.phrasing == "train"
        self.open_forms = open_forms and self.phrasing == "train"
        self.pieces = TRAIN if self.phrasing == "train" else HELDOUT

    def say(self, intent: str, form: str | None = None, **values) -> str:
        skill = self.invent_every_word  # False: the corpus's dialogues, whose text must stay what the base learned
        talk = talk_maker(self.rng) if self.open_talk and self.rng.random() < OPEN_TALK_RATE else None
        reword = None
        if self.open_forms and self.rng.random() < OPEN_FORMS_RATE:
            def reword(chosen: str) -> str:
                return open_form_words(self.rng, chosen, value_words(values))
        return fill(template(self.rng, intent, self.phrasing, later_forms=skill, wider=self.wider, form=form,
                             chatter=(lambda: chatter_word(self.rng, self.tool_split)) if skill else None,
                             talk=talk, reword=reword), values)

    def new_tool(self, avoid: set[str] = frozenset()) -> GenTool:
        """A generated tool of this conversation's splits whose subject starts with no word of ``avoid``."""
        return make_tool(self.rng, self.tool_split, self.value_split, avoid=avoid,
                         invent_every_word=self.invent_every_word, open_enums=self.open_enums)

    def thinking(self, text: str, *, always: bool = False) -> list[dict]:
        """A thinking block half the time, or ``always`` (drawn either way, so later draws do not shift)."""
        drawn = self.rng.random() < 0.5
        return [{"type": "thinking", "thinking": text}] if drawn or always else []

    def call(self, tool: Tool, tool_input: dict, thinking: str) -> tuple[list[dict], str]:
        """The assistant's call message and the user message with the real result; returns its content."""
        call_id = f"toolu_{self.calls}"
        self.calls += 1
        result = run_tool_call([tool], tool.name, tool_input, tool_use_id=call_id)
        if result["is_error"]:
            raise AssertionError(f"a generated call {tool.name}({tool_input}) failed: {result['content']}")
        if tool.server:
            blocks = [*self.thinking(thinking, always=True),
                      {"type": "server_tool_use", "id": call_id, "name": tool.name, "input": tool_input},
                      {"type": "server_tool_result", "tool_use_id": call_id, "content": result["content"],
                       "is_error": False}]
            return blocks, result["content"]
        return [{"role": "assistant", "content": [*self.thinking(thinking, always=True),
                                                  {"type": "tool_use", "id": call_id, "name": tool.name,
                                                   "input": tool_input}]},
                {"role": "user", "content": [result]}], result["content"]

    def distractors(self, n: int, avoid: set[str], course: bool = True) -> list[Tool]:
        tools = [self.new_tool(avoid).as_tool() for _ in range(n)]
        if course and self.rng.random() < 0.3:
            tools.append(self.rng.choice([calculator, count_letters, get_weather]))
        names, unique = set(), []
        for t in tools:
            if self.invent_every_word and _subject_of(t.name) in {_subject_of(name) for name in avoid}:
                continue  # another verb for the same subject (check_museum_status, museum_status): no right choice
            if t.name not in names and t.name not in avoid:
                names.add(t.name)
                unique.append(t)
        return unique

    def offer(self, needed: list[Tool], most: int = 5) -> list[Tool]:
        """The needed tools among distractors (1-5 in all), in a random order."""
        avoid = {t.name for t in needed} | {t.name.split("_")[0] for t in needed}
        extra = self.distractors(self.rng.randint(0, max(0, most - len(needed))), avoid,
                                 course=not any(t in (calculator, count_letters, get_weather) for t in needed))
        tools = needed + extra
        self.rng.shuffle(tools)
        return tools


# ------------------------------------------------------------------------------------------ requests
@dataclass
class Request:
    """One thing the user asks that a tool answers: the words, the call, and how to answer."""

    text: str
    tool: Tool
    tool_input: dict
    answer_path: tuple[str, ...]
    answer: Callable[[str], str]  # the result's content -> the answer sentence
    thinking: str


def _subject_request(b: _Builder, tool: GenTool) -> Request:
    arguments = draw_arguments(b.rng, tool, b.value_split)
    openly, avoid = b.open_framing and b.phrasing == "train" and b.rng.random() < OPEN_RATE, tool_words(tool)
    if tool.params:
        ways = (open_argument_styles(b.rng, avoid), open_joiners(b.rng)) if openly else b.pieces.argument_ways(b.wider)
        args = say_arguments(b.rng, tool, arguments, *ways)
        text = b.say("tool", open_form(b.rng, True, avoid) if openly else None, subject=tool.subject, args=args)
    else:
        text = b.say("tool_bare", open_form(b.rng, False, avoid) if openly else None, subject=tool.subject)
    path = (tool.nest, tool.keys[0]) if tool.nest else (tool.keys[0],)

    def answer(content: str) -> str:
        value = str(value_at(json.loads(content), path))
        return b.rng.choice([f"The {tool.subject} is {value}.", f"{tool.subject.capitalize()}: {value}.",
                             f"I checked: the {tool.subject} is {value}.", f"It's {value}."])
    tool_object = tool.as_tool()
    return Request(text, tool_object, arguments, path, answer, call_note(tool_object, tool.subject))


def _weather_request(b: _Builder) -> Request:
    city, day = draw(b.rng, "city", b.value_split), b.rng.choice(DAYS)

    def answer(content: str) -> str:
        forecast = json.loads(content)
        chance, high = forecast["chance_of_rain_percent"], forecast["high_c"]
        if b.rng.random() < 0.5:
            return (f"Yes, take an umbrella: {chance}% chance of rain." if chance >= UMBRELLA_FROM_PERCENT
                    else f"No umbrella needed: {chance}% chance of rain.")
        return f"{forecast['condition'].capitalize()} in {city}, {chance}% chance of rain, high {high}°C."
    return Request(b.say("weather", city=city, day=day), get_weather, {"city": city, "day": day},
                   ("chance_of_rain_percent",), answer, call_note(get_weather, "weather"))


def _letters_request(b: _Builder) -> Request:
    word = draw(b.rng, "word", b.value_split)
    letter = b.rng.choice(sorted(set(word))) if b.rng.random() < 0.9 else b.rng.choice("abcdefghijklmnopqrstuvwxyz")

    def answer(content: str) -> str:
        count = int(content)
        return f"{word} has {count} {letter if count == 1 else letter + chr(39) + 's'}."
    return Request(b.say("letters", letter=letter, word=word), count_letters, {"word": word, "letter": letter},
                   (), answer, call_note(count_letters, "letter"))


def _arithmetic_request(b: _Builder) -> Request:
    operands = [draw(b.rng, "integer", b.value_split) for _ in range(3)]
    form = b.rng.choice(["{} + {}", "{} - {}", "{} * {}", "{} / {}", "{} * {} + {}", "({} + {}) * {}"])
    expression = form.format(*operands)
    return Request(b.say("arithmetic", expression=expression), calculator, {"expression": expression}, (),
                   lambda content: b.rng.choice([f"The result is {content}.", f"{expression} = {content}."]),
                   call_note(calculator, "arithmetic"))


def _search_request(b: _Builder) -> Request:
    from llmkit.course.conversations import search_questions  # the topics data/docs can answer

    topics = [query for _, query, _ in search_questions("train" if b.value_split == "train" else "heldout")]
    topic = b.rng.choice(topics)

    def answer(content: str) -> str:
        hits = json.loads(content)
        return next(iter(hits.values())) if hits else f"I found nothing about {topic}."
    return Request(b.say("search", topic=topic), web_search, {"query": topic}, ("*first*",), answer,
                   call_note(web_search, "search"))


def _any_request(b: _Builder, kind: str | None = None) -> Request:
    kind = kind or b.rng.choice(["tool", "tool", "weather", "letters", "arithmetic"])
    if kind == "tool":
        return _subject_request(b, b.new_tool())
    return {"weather": _weather_request, "letters": _letters_request, "arithmetic": _arithmetic_request,
            "search": _search_request}[kind](b)


# ------------------------------------------------------------------------------------------ kinds
def _answer_requests(b: _Builder, requests: list[Request], text: str, offered: list[Tool]) -> tuple[list[dict], Expected]:
    """User text -> a call per request (in order), each with its real result -> one answer."""
    messages: list[dict] = [{"role": "user", "content": text}]
    answers, values = [], []
    server_blocks: list[dict] = []
    for request in requests:
        turns, content = b.call(request.tool, request.tool_input, request.thinking)
        if request.tool.server:
            server_blocks += turns
        else:
            if server_blocks:  # a server call's blocks open the next assistant message
                turns[0]["content"] = server_blocks + turns[0]["content"]
                server_blocks = []
            messages += turns
        answers.append(request.answer(content))
        values.append(str(value_at(json.loads(content), request.answer_path)))
    messages.append({"role": "assistant", "content": server_blocks + [{"type": "text", "text": " ".join(answers)}]})
    expected = Expected(tuple((r.tool.name, r.tool_input) for r in requests), tuple(r.answer_path for r in requests),
                        tuple(values))
    return messages, expected


def _single(b: _Builder, kind: str) -> SkillConversation:
    request = _any_request(b, kind)
    offered = b.offer([request.tool], most=5 if kind != "search" else 3)
    messages, expected = _answer_requests(b, [request], request.text, offered)
    return SkillConversation(kind, b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS), expected)


def _multi(b: _Builder) -> SkillConversation:
    first = _any_request(b, "tool")
    second = _any_request(b)
    while second.tool.name == first.tool.name:
        second = _any_request(b)
    text = fill(template(b.rng, "multi", b.phrasing, noise=False, wider=b.wider),
                {"first": first.text, "second": second.text})
    offered = b.offer([first.tool, second.tool], most=5)
    messages, expected = _answer_requests(b, [first, second], text, offered)
    return SkillConversation("multi", b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS), expected)


def _tool_list(b: _Builder, fewest: int, most: int) -> list[GenTool]:
    """``fewest``-``most`` generated tools whose subjects start with different words (one line per word)."""
    tools: list[GenTool] = []
    for _ in range(b.rng.randint(fewest, most)):
        tools.append(b.new_tool(avoid={t.subject.split()[0] for t in tools}))
    return tools


def _errands(b: _Builder) -> SkillConversation:
    """Several requests against one tool list, each answered before the next is asked.

    Each turn asks for a different tool of the same list, so no guess from the context alone (the
    last name written, the most familiar verb) names the right one: the request's words must be
    found in the list. It gives 2-3 lookups per conversation where ``tool`` gives one. ``expected``
    is the last turn's: an evaluation lets the model go on from the last request, history and all.
    """
    tools = _tool_list(b, 3, 4)
    offered = [t.as_tool() for t in tools]
    messages: list[dict] = []
    for tool in b.rng.sample(tools, b.rng.randint(2, 3)):
        request = _subject_request(b, tool)
        turn, expected = _answer_requests(b, [request], request.text, offered)
        messages += turn
    return SkillConversation("errands", b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS), expected)


def _which(b: _Builder) -> SkillConversation:
    """Which tool answers each of 3-5 things: one lookup per thing, then the names, and no call.
    The lookup's name carries over to unseen tools and is learnt last (``lookups``): a call
    practises it once, this 3-5 times in one short conversation."""
    tools = _tool_list(b, 4, 6)
    offered = [t.as_tool() for t in tools]
    asked = b.rng.sample(list(zip(tools, offered)), b.rng.randint(3, min(5, len(tools))))
    subjects = [t.subject for t, _ in asked]
    joined = ", ".join(subjects[:-1]) + b.rng.choice([" and ", ", "]) + subjects[-1]
    notes = "\n".join(lookup_note(tool, t.subject) for t, tool in asked)
    answer = " ".join(b.rng.choice([f"For the {t.subject}: {t.name}.", f"{t.subject.capitalize()}: {t.name}.",
                                    f"The {t.subject} comes from {t.name}."]) for t, _ in asked)
    messages = [{"role": "user", "content": b.say("which_tools", subjects=joined)},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": notes},
                                                  {"type": "text", "text": answer}]}]
    return SkillConversation("which", b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS),
                             Expected(facts={"names": [t.name for t, _ in asked]}))


def _missing(b: _Builder) -> SkillConversation:
    """A request whose tool is not offered: the answer says so and holds no number."""
    if b.rng.random() < 0.7:
        wanted = b.new_tool()
        request = _subject_request(b, wanted)
        subject = wanted.subject
        offered = b.distractors(b.rng.randint(0, 4), {wanted.name, wanted.subject.split()[0]}, course=True)
    else:
        request, subject = _weather_request(b), "weather forecast"
        offered = b.distractors(b.rng.randint(0, 3), {"get_weather"}, course=False)
    return _refusal(b, "missing", request.text, subject, offered)


def _not_offered(b: _Builder) -> SkillConversation:
    """One of the course's own requests (weather, letters, arithmetic, search) with its tool left
    out, often among the other course tools: the answer says so. Beside the same requests with
    their tool offered, it teaches that holding back hinges on the tool list; without it a model
    can learn to hold back whenever a request's words are unfamiliar (data/experiments/not_offered/)."""
    intent = b.rng.choice(sorted(COURSE_TOOLS))
    request = _any_request(b, intent)
    others = [tool for name, tool in COURSE_TOOLS.items() if name != intent]
    offered = b.rng.sample(others, b.rng.randint(0, 2)) + b.distractors(b.rng.randint(0, 3), {request.tool.name},
                                                                         course=False)
    b.rng.shuffle(offered)
    return _refusal(b, "not_offered", request.text, COURSE_SUBJECTS[intent], offered)


def _refusal(b: _Builder, kind: str, request: str, subject: str, offered: list[Tool]) -> SkillConversation:
    """The user's ``request`` answered by saying that no offered tool gives the ``subject``."""
    answer = b.rng.choice([f"I can't tell you that: none of my tools gives the {subject}.",
                           f"I have no tool for the {subject}, so I can't know it.",
                           f"Sorry, I don't have a tool that gives the {subject}."])
    content = [*b.thinking(f"None of my tools gives the {subject}."), {"type": "text", "text": answer}]
    messages = [{"role": "user", "content": request}, {"role": "assistant", "content": content}]
    return SkillConversation(kind, b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS),
                             Expected(no_invention=True, facts={"subject": subject}))


def _chitchat_turn(b: _Builder) -> tuple[str, str, str | None]:
    intent = b.rng.choice(["greet", "thanks", "abilities", "author"])
    if intent == "author":
        play = b.rng.choice(PLAYS)
        return b.say("author", play=play), f"William Shakespeare wrote {play}.", "Shakespeare"
    return b.say(intent), b.rng.choice(CHITCHAT_ANSWERS[intent]), None


def _chitchat(b: _Builder) -> SkillConversation:
    question, answer, keyword = _chitchat_turn(b)
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    offered = b.distractors(b.rng.randint(0, 4), set())
    return SkillConversation("chitchat", b.split, messages, offered, b.rng.choice(SYSTEM_PROMPTS),
                             Expected(answer_values=(keyword,) if keyword else ()))


def _memory(b: _Builder, open_intro: bool = False) -> SkillConversation:
    name = draw(b.rng, "name", b.value_split)
    form = open_introduction(b.rng) if open_intro else None
    messages = [{"role": "user", "content": b.say("memory_intro", form=form, name=name)},
                {"role": "assistant", "content": b.rng.choice([f"Nice to meet you, {name}!", f"Hello, {name}!",
                                                               f"Hi {name}, how can I help?"])}]
    if b.rng.random() < 0.5:  # something in between, so the name is further back
        question, answer, _ = _chitchat_turn(b)
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    messages += [{"role": "user", "content": b.say("memory_question")},
                 {"role": "assistant", "content": b.rng.choice([f"Your name is {name}.", f"You're {name}.",
                                                                f"You told me your name is {name}."])}]
    offered = b.distractors(b.rng.randint(0, 3), set())
    return SkillConversation("memory_open" if open_intro else "memory", b.split, messages, offered,
                             b.rng.choice(SYSTEM_PROMPTS), Expected(answer_values=(name,), name=name))


BUILDERS = {"which": _which, "tool": lambda b: _single(b, "tool"), "weather": lambda b: _single(b, "weather"),
            "letters": lambda b: _single(b, "letters"), "arithmetic": lambda b: _single(b, "arithmetic"),
            "search": lambda b: _single(b, "search"), "missing": _missing, "memory": _memory,
            "chitchat": _chitchat, "multi": _multi, "errands": _errands, "not_offered": _not_offered,
            "own_tool": own_tool_conversation, "own_tool_open": lambda b: own_tool_conversation(b, open_words=True),
            "memory_open": lambda b: _memory(b, open_intro=True)}


def make_skill(kind: str, split: str, seed: int | str, *, invent_every_word: bool = True,
               wider_phrasings: bool = False, open_framing: bool = False, open_enums: bool = False,
               open_talk: bool = False, open_forms: bool = False) -> SkillConversation:
    """One conversation of ``kind`` and ``split``: a pure function of (kind, split, seed).

    ``invent_every_word``: generated tools make up their measure and parameter names too, not only
    their domain (``toolgen.make_tool``); the pretraining corpus's dialogues turn it off, so that the
    text a finished recipe stage was built from does not change. ``wider_phrasings`` adds the
    phrasing pieces written after the recipe's skills stage was trained (``phrasing_pools``).
    ``open_framing``: half the generated-tool requests of a split with training phrasings take
    their connecting words from an open pool (``llmkit.course.open_framing``). ``open_enums``:
    enum and boolean parameters are named, and enums' options drawn, like other tool words
    (``toolgen.make_param``). ``open_talk``: half the requests of a split with training phrasings
    take the talk around them (greeting, asides, sign-off) from an open pool (``open_talk``).
    ``open_forms``: half the requests of a split with training phrasings have words of their form
    swapped, dropped or added (``llmkit.course.open_forms``).
    """
    if kind not in BUILDERS:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    return BUILDERS[kind](_Builder(random.Random(f"llmkit-skills|{kind}|{split}|{seed}"), split, invent_every_word,
                                   wider_phrasings, open_framing, open_enums, open_talk, open_forms))


def make_skills(n: int, *, split: str = "train", seed: int = 0, kinds=None, wider_phrasings: bool = False,
                open_framing: bool = False, open_enums: bool = False, open_talk: bool = False,
                open_forms: bool = False, mix: dict[str, float] | None = None) -> list[SkillConversation]:
    """``n`` conversations of ``split``. ``kinds=None`` mixes the kinds by ``mix`` (kind -> share;
    ``MIX`` by default), drawn at random; a list of ``kinds`` takes turns."""
    splits_of(split)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a whole number of conversations (0 or more), got {n!r}")
    if kinds is not None and mix is not None:
        raise ValueError("give kinds (taken in turn) or a mix (drawn by share), not both")
    rng = random.Random(f"llmkit-skill-mix|{split}|{seed}")
    if kinds is None:
        shares = MIX if mix is None else checked_mix(mix)
        chosen = rng.choices(list(shares), list(shares.values()), k=n)
    else:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        unknown = [k for k in kinds if k not in BUILDERS]
        if unknown or not kinds:
            raise ValueError(f"kinds must be a non-empty list drawn from {KINDS}, got {kinds!r}")
        chosen = [kinds[i % len(kinds)] for i in range(n)]
    return [make_skill(kind, split, f"{seed}|{i}", wider_phrasings=wider_phrasings, open_framing=open_framing,
                       open_enums=open_enums, open_talk=open_talk, open_forms=open_forms)
            for i, kind in enumerate(chosen)]


def checked_mix(mix) -> dict[str, float]:
    """``mix`` if it maps kinds to positive shares, else a ValueError that says what is wrong."""
    if not isinstance(mix, dict) or not mix or any(k not in BUILDERS for k in mix) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in mix.values()):
        raise ValueError(f"a mix maps kinds from {KINDS} to positive shares, like {MIX}; got {mix!r}")
    return mix
