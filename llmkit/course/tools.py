"""The course's example tools: what the chat model is fine-tuned to call, and what the notebooks offer it.

They are ordinary ``@tool`` functions (``llmkit.chat.tools``), the same kind a learner writes:
the chat package knows how to describe, validate and run a tool, not which tools exist.
"""
from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Literal

from llmkit.chat.tools import Tool, tool, tools_by_name
from llmkit.course.calculator import calculate


@tool
def calculator(expression: str) -> int | float:
    """Evaluate an arithmetic expression exactly, as Python would, and return the number.

    Language models predict the digits of a result like any other tokens; this computes them.
    Safe on untrusted text: see ``llmkit.course.calculator`` for what is allowed and the size limits.

    Args:
        expression: Arithmetic such as "(37 * 91) / 4" or "2 ** 10", using numbers,
            + - * / // % **, parentheses, pi, e, abs(x), round(x, digits) and sqrt(x).
    """
    return calculate(expression)


@tool
def count_letters(word: str, letter: str) -> int:
    """Count how many times a letter appears in a word, ignoring upper and lower case.

    The "strawberry" test: a model sees tokens, not letters, so counting is a job for code.
    Comparison is case-insensitive (``casefold``) and Unicode-normalised (NFC), so "R" counts
    the r's in "Strawberry" and a precomposed "é" matches an e followed by a combining accent.

    Args:
        word: The word (or any text) to look in.
        letter: The single letter to count, such as "r".
    """
    word, letter = unicodedata.normalize("NFC", word), unicodedata.normalize("NFC", letter)
    if len(letter) != 1:
        raise ValueError(f"letter must be exactly one character, got {letter!r}; count one letter per call")
    return sum(1 for character in word if character.casefold() == letter.casefold())


@tool
def get_weather(city: str, day: Literal["today", "tomorrow"] = "today") -> dict:
    """Get the weather forecast for a city, today or tomorrow. The data is fake, made up for the course.

    Deterministic: the numbers come from a SHA-256 hash of the city (case and extra spaces
    ignored) and the day, so the same question always gets the same answer, in every Python
    process (Python's own ``hash()`` of a string changes from run to run).

    Args:
        city: The city's name, such as "Pune" or "Paris".
        day: Which day's forecast to get.
    """
    city = " ".join(city.split())
    if not city:
        raise ValueError("city is empty; pass a city name such as 'Pune'")
    digest = hashlib.sha256(f"{city.casefold()}|{day}".encode()).digest()
    chance_of_rain = digest[0] % 101
    high_c = 12 + digest[1] % 26  # 12 .. 37 °C: plausible for the course's example cities
    low_c = high_c - 3 - digest[2] % 10  # 3 .. 12 °C cooler at night
    if chance_of_rain >= 70:
        condition = "rain"
    elif chance_of_rain >= 40:
        condition = "cloudy"
    else:
        condition = "sunny" if digest[3] % 2 else "partly cloudy"
    return {
        "city": city,
        "day": day,
        "condition": condition,
        "chance_of_rain_percent": chance_of_rain,
        "high_c": high_c,
        "low_c": low_c,
    }


SEARCH_RESULTS = 2  # hits web_search returns: two titles and snippets, short enough for a small model's window


@tool(server=True)
def web_search(query: str) -> str:
    """Search the course's documents, a small stand-in for the web.

    A server tool: the client runs it inside the request, as a hosted API runs its web search.
    The result is a JSON object from each hit's title to its snippet, the best of the
    ``SEARCH_RESULTS`` hits first (``{}`` when nothing matches), from ``llmkit.course.search`` over
    ``data/docs``. Only a title and one sentence per hit enter the context, and as an object
    rather than a list of ``{"title": ..., "snippet": ...}`` records, which the course tokenizer
    (trained on Shakespeare, not JSON) writes in nearly twice the tokens, and the course model
    reads only 256.

    Args:
        query: A few words to search for, such as "monsoon in Pune" or "KV cache".
    """
    from llmkit.course.search import course_index  # here, so importing llmkit.chat.tools stays light

    results: dict[str, str] = {}
    for hit in course_index().search(query, k=SEARCH_RESULTS):
        title = hit.title if hit.title not in results else f"{hit.title} ({hit.path})"  # keys must differ
        results[title] = hit.snippet
    return json.dumps(results, ensure_ascii=False)


@tool
def send_email(to: str, body: str) -> str:
    """Send an email from the user's account. Simulated: nothing is sent, nothing leaves the machine.

    The course's example of a tool that *acts* in the user's name: the kind a prompt injection
    wants the model to call (notebook 11). The defences belong to the harness, not to this
    function: offer it only to a task that needs it, and ask a human first
    (``run_tool_call(..., approve=...)``). It only reports what it would have sent.

    Args:
        to: The recipient's address, such as "ada@example.com".
        body: The text of the email.
    """
    to = to.strip()
    if "@" not in to:
        raise ValueError(f"to must be an email address such as 'ada@example.com', got {to!r}")
    return f"simulated: {len(body)} characters to {to} would have been sent (nothing was sent)"


EXAMPLE_TOOLS = [calculator, count_letters, get_weather]
"""The client tools the chat model is fine-tuned with. ``web_search`` (a server tool) is separate."""


def offered_tools(tools) -> list[Tool]:
    """The example ``Tool`` objects for ``tools`` (Tool objects, or the definitions a ``Conversation``
    offers), in the same order, so the prompt is the same either way and the harness can run them."""
    by_name = tools_by_name(EXAMPLE_TOOLS)
    return [t if isinstance(t, Tool) else by_name[t["name"]] for t in tools or []]
