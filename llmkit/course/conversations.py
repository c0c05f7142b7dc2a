"""Seeded synthetic conversations: the examples the chat model is fine-tuned and evaluated on.

A base model only continues text. Supervised fine-tuning shows it conversations in the chat
template until it writes the assistant's part by itself, so these conversations *are* the
behaviours we want, each one small enough to fit the first course model's 256-token context
(the recipe's skill data, ``llmkit.course.skills``, composes longer and more varied ones):

- weather:    "Will it rain in Pune tomorrow?" -> think (a forecast can't be in the training data)
              -> call get_weather -> answer with the result's chance of rain and umbrella advice
- letters:    "How many r's are in strawberry?" -> call count_letters -> answer with its count
- arithmetic: "What is 37 * 91?" -> call calculator -> answer with its number
- memory:     "My name is Ada." ... "What's my name?" (answerable only from the re-sent history)
- direct:     greetings and simple facts, answered without a tool
- no_tool:    a question that needs a tool nobody offered, answered "I can't know" (no invented number)
- search:     "What is the monsoon like in Pune?" -> call the server tool web_search -> answer with
              the top hit's snippet (not in KINDS: ask for it by name)
- react:      a weather, letters or arithmetic task in the legacy ReAct text protocol (``llmkit.course.react``):
              "Thought: ...\nAction: tool(...)", then "Observation: <result>", then "Answer: ..."
              (not in KINDS either: ask for it by name)
- repeat:     "Repeat after me: Anya Warsaw giraffe" -> the same words back (not in KINDS: practice at
              copying from the context, the skill the memory answer needs; ask for it by name)

Every tool result is computed by the real tool (``llmkit.chat.tools.run_tool_call``), so an answer
always agrees with what the harness would send. Umbrella rule: take one when the chance of rain
is 50% or more.

The values (held-out cities, names, words and numbers) and the ``Conversation`` type are in
``llmkit.course.conversation_data``. Everything is drawn from ``random.Random`` seeded with a
string, never from ``hash()`` or set order, so the same seed gives the same data in every process.
Built on these: preference pairs for DPO (``llmkit.course.preferences``) and the strawberry
experiment's task sets (``llmkit.course.strawberry``). ``weather_conversation()`` is the Pune
example on its own.
"""
from __future__ import annotations

import json
import random

from llmkit.chat.tools import run_tool_call
from llmkit.course.conversation_data import (ARITHMETIC_QUESTIONS, ARITHMETIC_THINKING, CITIES, DIRECT, EXPRESSIONS,
                                             INTRODUCTIONS, LETTER_QUESTIONS, LETTER_THINKING, NAME_QUESTIONS, NAMES,
                                             SYSTEM_PROMPTS, UMBRELLA_FROM_PERCENT, WEATHER_QUESTIONS, WEATHER_THINKING,
                                             Conversation, Expected, call_and_result, check_split, numbers, offer,
                                             words)
from llmkit.course.react import format_answer, format_observation, format_step, react_instructions
from llmkit.course.search import course_index
from llmkit.course.tools import calculator, count_letters, get_weather, web_search

KINDS = ("weather", "letters", "arithmetic", "memory", "direct", "no_tool")
TOOL_KINDS = ("weather", "letters", "arithmetic")  # the kinds whose answer needs a tool


def _weather(rng: random.Random, split: str, questions=tuple(WEATHER_QUESTIONS)) -> Conversation:
    return weather_conversation(rng.choice(CITIES[split]), rng.choice(["today", "tomorrow"]),
                                question=rng.choice(questions), thinking=rng.choice(WEATHER_THINKING), split=split)


def weather_conversation(city: str = "Pune", day: str = "tomorrow", *,
                         question: str = "Will it rain in {city} {day}? Should I take an umbrella?",
                         thinking: str | None = WEATHER_THINKING[0], split: str | None = None) -> Conversation:
    """The weather conversation for one city and day (``question`` is a key of ``WEATHER_QUESTIONS``;
    ``{city}``, ``{day}`` and ``{Day}`` are filled in): think, call get_weather, answer from its result.
    ``thinking=None`` leaves the thinking block out (about a dozen tokens a full context can use).
    ``split`` defaults to the split whose city list holds ``city`` ("train" for any other city)."""
    split = split or ("heldout" if city in CITIES["heldout"] else "train")
    if question not in WEATHER_QUESTIONS:
        raise ValueError(f"question must be one of the WEATHER_QUESTIONS templates, got {question!r}")
    tool_input = {"city": city, "day": day}
    thought = None if thinking is None else thinking.format(day=day, Day=day.capitalize())
    turns, content = call_and_result(thought, get_weather, tool_input)
    forecast = json.loads(content)
    chance, high = forecast["chance_of_rain_percent"], forecast["high_c"]
    umbrella = chance >= UMBRELLA_FROM_PERCENT
    if WEATHER_QUESTIONS[question] == "umbrella":
        answer = (f"Yes, take an umbrella: {chance}% chance of rain." if umbrella
                  else f"No umbrella needed: {chance}% chance of rain.")
        values = (f"{chance}%",)
    else:
        answer = f"{forecast['condition'].capitalize()}, {chance}% chance of rain, high {high}°C."
        values = (f"{chance}%", f"{high}°C")
    messages = [{"role": "user", "content": question.format(city=city, day=day)}, *turns,
                {"role": "assistant", "content": answer}]
    facts = {"city": city, "day": day, "forecast": forecast, "umbrella": umbrella}
    return Conversation("weather", split, messages, [get_weather.definition()], None,
                        Expected("get_weather", tool_input, values, facts=facts))


def count_answer(word: str, letter: str, count: int) -> str:
    letters = letter if count == 1 else f"{letter}'s"
    return f"{word} has {count} {letters}."


def pick_letter(rng: random.Random, word: str) -> str:
    """A letter to ask about: one of ``word``'s letters, or now and then (1 in 10) one it lacks."""
    if rng.random() < 0.1:  # sometimes a letter that isn't there: the answer is 0
        absent = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in word]
        return rng.choice(absent)
    return rng.choice(sorted(set(word)))


def letters_conversation(rng: random.Random, split: str, word: str | None = None, letter: str | None = None,
                         *, offer_others: bool = True) -> Conversation:
    """A letter-counting conversation: think, call count_letters, answer with its count.

    ``word`` and ``letter`` default to a draw from ``split`` (any word works, even one of neither
    split); ``offer_others=False`` offers count_letters alone instead of with other tools.
    """
    word = word or rng.choice(words(split))
    letter = letter or pick_letter(rng, word)
    tool_input = {"word": word, "letter": letter}
    thinking = rng.choice(LETTER_THINKING)
    turns, content = call_and_result(thinking, count_letters, tool_input)
    count = int(content)
    messages = [{"role": "user", "content": rng.choice(LETTER_QUESTIONS).format(letter=letter, word=word)}, *turns,
                {"role": "assistant", "content": count_answer(word, letter, count)}]
    return Conversation("letters", split, messages, offer(rng, count_letters, others=offer_others),
                        rng.choice(SYSTEM_PROMPTS),
                        Expected("count_letters", tool_input, (str(count),), facts={"word": word, "letter": letter,
                                                                                    "count": count}))


def _arithmetic(rng: random.Random, split: str) -> Conversation:
    pool = numbers(split)
    operands = {"a": rng.choice(pool), "b": rng.choice(pool), "c": rng.choice(pool)}
    template = rng.choice(EXPRESSIONS)
    expression = template.format(**operands)
    used = [operands[k] for k in "abc" if "{" + k + "}" in template]
    thinking = rng.choice(ARITHMETIC_THINKING)
    turns, content = call_and_result(thinking, calculator, {"expression": expression})
    messages = [{"role": "user", "content": rng.choice(ARITHMETIC_QUESTIONS).format(expression=expression)}, *turns,
                {"role": "assistant", "content": f"The result is {content}."}]
    return Conversation("arithmetic", split, messages, offer(rng, calculator), rng.choice(SYSTEM_PROMPTS),
                        Expected("calculator", {"expression": expression}, (content,),
                                 facts={"operands": used, "result": json.loads(content)}))


def _memory(rng: random.Random, split: str) -> Conversation:
    name = rng.choice(NAMES[split])
    messages = [{"role": "user", "content": rng.choice(INTRODUCTIONS).format(name=name)},
                {"role": "assistant", "content": f"Nice to meet you, {name}!"}]
    if rng.random() < 0.5:  # something else in between, so the name is further back
        question, answer, _ = rng.choice(DIRECT[split])
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    messages += [{"role": "user", "content": rng.choice(NAME_QUESTIONS)},
                 {"role": "assistant", "content": f"Your name is {name}."}]
    tools = offer(rng, None) or None
    return Conversation("memory", split, messages, tools, rng.choice(SYSTEM_PROMPTS),
                        Expected(None, None, (name,), facts={"name": name}))


REPEAT_REQUESTS = ["Repeat after me: {text}", "Say this back to me exactly: {text}", "Please repeat: {text}"]


def repeat_conversation(rng: random.Random, split: str, items: list[str] | None = None) -> Conversation:
    """Say a few names, cities and words back exactly: practice at copying from the context.

    Remembering a name is copying it, token by token, from earlier in the history; a small model
    copies only the tokens it has practised copying. ``items`` defaults to 3-6 values of ``split``.
    """
    pool = NAMES[split] + CITIES[split] + words(split)
    items = items or [rng.choice(pool) for _ in range(rng.randint(3, 6))]
    text = " ".join(items)
    messages = [{"role": "user", "content": rng.choice(REPEAT_REQUESTS).format(text=text)},
                {"role": "assistant", "content": text}]
    return Conversation("repeat", split, messages, offer(rng, None) or None, rng.choice(SYSTEM_PROMPTS),
                        Expected(None, None, (text,), facts={"items": items}))


def _direct(rng: random.Random, split: str) -> Conversation:
    question, answer, keyword = rng.choice(DIRECT[split])
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return Conversation("direct", split, messages, offer(rng, None) or None, rng.choice(SYSTEM_PROMPTS),
                        Expected(None, None, (keyword,)))


def _no_tool(rng: random.Random, split: str) -> Conversation:
    offered = rng.choice([[], [calculator], [count_letters], [calculator, count_letters]])
    if rng.random() < 0.75:
        city, day = rng.choice(CITIES[split]), rng.choice(["today", "tomorrow"])
        question = rng.choice(list(WEATHER_QUESTIONS)).format(city=city, day=day)
        thinking = f"{day.capitalize()}'s weather isn't in my training data, and I have no weather tool."
        answer = f"I can't know {day}'s weather in {city}: I have no weather tool. Please check a forecast."
        facts = {"city": city, "day": day, "missing_tool": "get_weather"}
    else:
        question = rng.choice(["What time is it?", "What's the time right now?"])
        thinking, answer = "I have no clock and no time tool.", "I can't know the time: I have no clock or time tool."
        facts = {"missing_tool": "clock"}
    messages = [{"role": "user", "content": question},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": thinking},
                                                  {"type": "text", "text": answer}]}]
    return Conversation("no_tool", split, messages, [t.definition() for t in offered] or None,
                        rng.choice(SYSTEM_PROMPTS), Expected(None, None, (), no_invention=True, facts=facts))


REACT_TASKS = ("weather", "letters", "arithmetic")
# Beside the ReAct instructions, the longest weather question would not fit the first model's 256 tokens.
REACT_WEATHER_QUESTIONS = tuple(q for q in WEATHER_QUESTIONS if "Should I take an umbrella" not in q)


def as_react(conversation: Conversation) -> Conversation:
    """The same tool conversation in the legacy ReAct text protocol (``llmkit.course.react``).

    The system prompt lists, as text, the tools the structured version offered (weather questions
    get get_weather alone, as there: its result is long); no structured tools are offered. The
    assistant writes ``Thought: ...`` and ``Action: tool(...)`` and ends its turn, the harness sends
    ``Observation: <the real tool result>`` as a user message, and the assistant writes ``Answer: ...``.
    """
    if conversation.kind not in REACT_TASKS:
        raise ValueError(f"only {REACT_TASKS} conversations have a ReAct version, got {conversation.kind!r}")
    question, call, result, answer = conversation.messages
    thinking, tool_use = call["content"]
    step = format_step(thinking["thinking"], tool_use["name"], tool_use["input"])
    messages = [question, {"role": "assistant", "content": step},
                {"role": "user", "content": format_observation(result["content"][0])},
                {"role": "assistant", "content": format_answer(answer["content"])}]
    expected = conversation.expected
    facts = {**expected.facts, "task": conversation.kind, "tools": [t["name"] for t in conversation.tools]}
    return Conversation("react", conversation.split, messages, None, react_instructions(conversation.tools),
                        Expected(expected.tool, expected.tool_input, expected.answer_values, facts=facts))


def _react(rng: random.Random, split: str) -> Conversation:
    task = rng.choice(REACT_TASKS)
    if task == "weather":
        return as_react(_weather(rng, split, questions=REACT_WEATHER_QUESTIONS))
    return as_react(BUILDERS[task](rng, split))


BUILDERS = {"weather": _weather, "letters": letters_conversation, "arithmetic": _arithmetic, "memory": _memory,
            "direct": _direct, "no_tool": _no_tool, "react": _react,
            "repeat": repeat_conversation}  # "react" and "repeat" are not in KINDS: ask for them


def make_conversations(n: int, *, split: str = "train", seed: int = 0, kinds=None) -> list[Conversation]:
    """``n`` conversations of ``split``, the kinds taking turns (``kinds`` defaults to all of ``KINDS``).

    The turns start at the first kind: with ``n`` smaller than ``len(kinds)``, the last kinds do
    not appear (``llmkit.training.finetune`` rotates the list per step for that reason)."""
    kinds = check_kinds(kinds)
    rng = random.Random(f"llmkit-conversations|{check_split(split)}|{seed}")
    return [BUILDERS[kinds[i % len(kinds)]](rng, split) for i in range(check_count(n))]


def check_kinds(kinds) -> list[str]:
    kinds = list(KINDS if kinds is None else [kinds] if isinstance(kinds, str) else kinds)
    unknown = [k for k in kinds if k not in BUILDERS]
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty list drawn from {list(BUILDERS)}, got {kinds!r}")
    return kinds


def check_count(n: int) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a whole number of conversations (0 or more), got {n!r}")
    return n


# ---------------------------------------------------------------------------------------------- search
# The "search" kind: a question that a document in data/docs answers. The assistant calls the
# server tool web_search (the client runs it inside the request), reads the real result, and
# answers with the top hit's snippet. Not in KINDS: a fine-tuning config asks for it in `kinds`.
SEARCH_CITIES = {  # cities with a travel note in data/docs, split like CITIES (Mumbai is train only)
    "train": ["Pune", "Mumbai", "Paris", "Rome", "London", "Delhi", "Cairo", "Lima", "Seoul", "Prague", "Boston",
              "Venice", "Lagos"],
    "heldout": ["Warsaw", "Tunis", "Sofia", "Doha", "Oxford", "Kandy"],
}
SEARCH_CITY_QUESTIONS = {  # question -> the query, copied from the question's words
    "What is {city} known for?": "{city} known for",
    "What is the climate like in {city}?": "climate in {city}",
    "When does it rain in {city}?": "rain in {city}",
    "When is the best time to visit {city}?": "best time to visit {city}",
}
SEARCH_QUESTIONS = {  # (question, query, the document that answers it) beyond the city templates
    "train": [("What is the monsoon like in Pune?", "monsoon in Pune", "pune.md"),
              ("What is the monsoon like in Mumbai?", "monsoon in Mumbai", "mumbai.md"),
              ("How long is a token on average?", "token on average", "tokens.md"),
              ("Are prices counted in tokens or words?", "prices counted in tokens", "tokens.md"),
              ("What does attention let a token do?", "attention token", "attention.md"),
              ("What does a causal mask do?", "causal mask", "attention.md"),
              ("What does a KV cache store?", "KV cache store", "kv_cache.md"),
              ("How much memory does a KV cache use?", "KV cache memory", "kv_cache.md"),
              ("What does prompt caching reuse?", "prompt caching reuse", "prompt_caching.md"),
              ("How are cached tokens billed?", "cached tokens billed", "prompt_caching.md"),
              ("How does a model use a tool?", "model use a tool", "tool_use.md"),
              ("Who runs a tool, the model or the harness?", "harness runs a tool", "tool_use.md"),
              ("What is prompt injection?", "prompt injection", "prompt_injection.md"),
              ("How do you defend against prompt injection?", "defend against prompt injection",
               "prompt_injection.md"),
              ("What is a server tool?", "server tool", "server_tools.md"),
              ("When does a reply stop with tool_use?", "stop with tool_use", "server_tools.md"),
              ("What is a knowledge cutoff?", "knowledge cutoff", "knowledge_cutoff.md"),
              ("Why does a model need web search for news?", "web search for news", "knowledge_cutoff.md"),
              ("What is a thinking block?", "thinking block", "thinking.md"),
              ("Are thinking tokens billed?", "thinking tokens billed", "thinking.md")],
    "heldout": [("When are the monsoons in Kandy?", "monsoons in Kandy", "kandy.md"),
                ("How does byte-pair encoding build a vocabulary?", "byte-pair encoding vocabulary", "bpe.md"),
                ("What does BPE start from?", "BPE start", "bpe.md"),
                ("What is a context window?", "context window", "context_window.md"),
                ("What happens when a conversation outgrows the context window?",
                 "conversation outgrows the context window", "context_window.md"),
                ("What does temperature do?", "temperature", "sampling.md"),
                ("What does a seed do when sampling?", "seed sampling", "sampling.md"),
                ("What is an embedding?", "embedding", "embeddings.md"),
                ("Why do similar tokens get nearby embeddings?", "nearby embeddings", "embeddings.md")],
}
SEARCH_THINKING = ["I'll search the documents.", "Better to look this up."]


def search_questions(split: str) -> list[tuple[str, str, str]]:
    """Every ``(question, query, document)`` the search kind asks in ``split`` (documents are disjoint
    between the splits, so held-out questions are about notes the model never answered from)."""
    city_questions = [(question.format(city=city), query.format(city=city), f"{city.lower()}.md")
                      for city in SEARCH_CITIES[check_split(split)] for question, query in SEARCH_CITY_QUESTIONS.items()]
    return city_questions + list(SEARCH_QUESTIONS[split])


def search_conversation(question: str, query: str, document: str, *, thinking: str = SEARCH_THINKING[0],
                        system: str | None = None, split: str = "train") -> Conversation:
    """Think, call web_search with ``query``, read its real result, answer with the top snippet.

    The call and its result are ``server_tool_use`` and ``server_tool_result`` blocks inside the one
    assistant message, as the client stores a server tool's run (they render as a tool call, its
    result and a new ``<|assistant|>`` header). Raises if ``document`` is not the top hit, so a
    question that the search would answer from another note never becomes training data.
    """
    call_id = "srvtoolu_0"
    result = run_tool_call([web_search], "web_search", {"query": query}, tool_use_id=call_id)
    hits = json.loads(result["content"]) if not result["is_error"] else {}
    title = course_index().document(document).title
    if not hits or next(iter(hits)) != title:
        raise AssertionError(f"web_search({query!r}) does not rank {document} first: {result['content']}")
    answer = hits[title]  # the top snippet, copied: data/docs keeps its sentences short, one fact each
    content = [{"type": "thinking", "thinking": thinking},
               {"type": "server_tool_use", "id": call_id, "name": "web_search", "input": {"query": query}},
               {"type": "server_tool_result", "tool_use_id": call_id, "content": result["content"], "is_error": False},
               {"type": "text", "text": answer}]
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": content}]
    facts = {"document": document, "title": title, "hits": hits}
    return Conversation("search", split, messages, [web_search.definition()], system,
                        Expected("web_search", {"query": query}, (answer,), facts=facts))


def _search(rng: random.Random, split: str) -> Conversation:
    question, query, document = rng.choice(search_questions(split))
    return search_conversation(question, query, document, thinking=rng.choice(SEARCH_THINKING),
                               system=rng.choice(SYSTEM_PROMPTS), split=split)


BUILDERS["search"] = _search  # not in KINDS (nor in the evals): a fine-tuning config asks for it in `kinds`
