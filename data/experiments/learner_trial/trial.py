"""Try a chat model the way a new learner would: their own words, their own ``@tool`` functions.

    python data/experiments/learner_trial/trial.py --model chat            # the shipped chat model
    python data/experiments/learner_trial/trial.py --model FOLDER --out F  # any model folder

The skill evals draw thousands of conversations from the course's generators; this is the other
half of the picture, a dozen requests written by hand, none of them from the training sentences:
the ones a learner tries first (issue 13 lists them). Each case is one conversation, greedy,
through the one harness loop (``Client`` + ``run_agent``, real tools), and is scored on what can
be checked exactly: the calls made (name and arguments), a word the answer must carry, and whether
the prompt fitted the window at all. It prints every reply in full and writes ``results.json``.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from llmkit.chat.agent import run_agent
from llmkit.chat.client import Client
from llmkit.chat.message import ContextWindowError
from llmkit.chat.tools import Tool, tool
from llmkit.course.skill_scores import calls_in, repeats
from llmkit.course.tools import calculator, count_letters, get_weather
from llmkit.files import atomic_write

MAX_TOKENS = 96


@tool
def forecast(place: str) -> dict:
    """Tomorrow's forecast for a place.

    Args:
        place: Where, for example "Lisbon".
    """
    return {"place": place, "sky": "clear", "high": 21}


@tool
def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
def convert_currency(amount: float, to: Literal["EUR", "USD", "INR"]) -> float:
    """Convert an amount of money into another currency (rates are made up).

    Args:
        amount: How much money.
        to: The currency to convert into.
    """
    return round(amount * {"EUR": 0.9, "USD": 1.0, "INR": 83.0}[to], 2)


FIVE_TOOLS = [get_weather, count_letters, calculator, forecast, add]


@dataclass
class Case:
    """One learner request: the turns they type, the tools they offer, and what a right reply holds.

    ``calls``: the (name, arguments) every right reply makes, in order ([] = no tool should be
    called); ``answer``: words the last reply's text must contain, whole (None = not checked)."""

    name: str
    turns: list[str]
    tools: list[Tool]
    calls: list[tuple[str, dict]] = field(default_factory=list)
    answer: str | None = None


CASES = [
    Case("count letters", ["Count the letter e in excellence."], [count_letters],
         [("count_letters", {"word": "excellence", "letter": "e"})], "4 e"),
    Case("add with the calculator", ["What's 1234 + 4321?"], [calculator],
         [("calculator", {"expression": "1234 + 4321"})], "5555"),
    Case("weather, terse", ["Umbrella for Oslo tomorrow?"], [get_weather],
         [("get_weather", {"city": "Oslo", "day": "tomorrow"})]),
    Case("two requests at once", ["Will it rain in Pune tomorrow? And how many r's are in strawberry?"],
         [get_weather, count_letters],
         [("get_weather", {"city": "Pune", "day": "tomorrow"}), ("count_letters", {"word": "strawberry", "letter": "r"})],
         "3 r"),
    Case("a name, stated", ["I'm called Rohan.", "What's my name?"], [], [], "Rohan"),
    Case("a name, asked to use", ["Call me Zephyrine.", "Who am I?"], [], [], "Zephyrine"),
    Case("the learner's own tool", ["What's the forecast for Paris?"], [forecast],
         [("forecast", {"place": "Paris"})], "21"),
    Case("the learner's own two-argument tool", ["Add 17 and 25 for me."], [add],
         [("add", {"a": 17, "b": 25})], "42"),
    Case("an enum argument", ["How much is 40 dollars in EUR?"], [convert_currency],
         [("convert_currency", {"amount": 40, "to": "EUR"})], "36"),
    Case("five tools offered", ["How many s's are in mississippi?"], FIVE_TOOLS,
         [("count_letters", {"word": "mississippi", "letter": "s"})], "4 s"),
    Case("no tool fits", ["What's the price of gold today?"], [get_weather, count_letters], [], None),
]


def call_matches(made: tuple[str, dict], wanted: tuple[str, dict]) -> bool:
    """Same tool, and every argument equal (text compared without case or outer spaces, numbers as numbers)."""
    (name, arguments), (wanted_name, wanted_arguments) = made, wanted
    if name != wanted_name or set(arguments) - set(wanted_arguments):
        return False
    for key, value in wanted_arguments.items():
        got = arguments.get(key)
        if isinstance(value, str):
            if not isinstance(got, str) or " ".join(got.split()).casefold() != value.casefold():
                return False
        elif isinstance(got, bool) or not isinstance(got, (int, float)) or got != value:
            return False
    return True


def says(reply: str, wanted: str) -> bool:
    """``wanted`` occurs in ``reply`` as a whole (any case): "5555" is not in "555555", "3 r" is in "3 r's"."""
    return re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", reply, flags=re.IGNORECASE) is not None


def score(case: Case, transcript: list[dict], reply: str, stop_reason: str, fitted: bool) -> dict:
    """The checks of one case: ``fitted`` (the prompt fitted the window), ``right_calls`` (the calls
    made are exactly the wanted ones, in order), ``answer_has`` (the last reply carries the wanted
    string; None when the case has none), ``ends_turn`` (it ended its turn, without a loop)."""
    made = [(call["name"], call["input"]) for call in calls_in(transcript)]
    right_calls = len(made) == len(case.calls) and all(map(call_matches, made, case.calls))
    answer_has = None if case.answer is None else fitted and says(reply, case.answer)
    return {"fitted": fitted, "right_calls": fitted and right_calls, "answer_has": answer_has,
            "ends_turn": stop_reason == "end_turn" and not repeats(reply),
            "calls": [{"name": name, "input": arguments} for name, arguments in made]}


def run_case(client: Client, case: Case) -> dict:
    """The conversation of one case, turn by turn, each turn through ``run_agent``."""
    transcript: list[dict] = []
    reply, stop_reason, fitted, notes = "", "end_turn", True, []
    for turn in case.turns:
        transcript.append({"role": "user", "content": turn})
        result = run_agent(client, transcript, case.tools, max_tokens=MAX_TOKENS, temperature=0)
        transcript, notes = result.transcript, notes + result.notes
        if isinstance(result.error, ContextWindowError):  # the request itself did not fit the window
            fitted, reply, stop_reason = False, f"ContextWindowError: {result.error}", "context_window"
            break
        reply = result.final.text if result.final is not None else ""
        stop_reason = result.final.stop_reason if result.final is not None else result.stop_reason
        if stop_reason != "end_turn":
            break  # a turn that did not end (cut off, or still calling) cannot be followed by the next one
    return {"case": case.name, "turns": case.turns, "tools": [t.name for t in case.tools], "reply": reply,
            "stop_reason": stop_reason, "context_notes": notes, **score(case, transcript, reply, stop_reason, fitted)}


def trial(client: Client, cases: list[Case] = CASES) -> dict:
    """Every case on one client's model, with the totals."""
    rows = [run_case(client, case) for case in cases]
    checked = [row for row in rows if row["answer_has"] is not None]
    return {"context_window": client.context_window, "cases": rows, "n": len(rows),
            "right_calls": sum(row["right_calls"] for row in rows),
            "answers_right": sum(row["answer_has"] for row in checked), "answers_checked": len(checked),
            "ends_turn": sum(row["ends_turn"] for row in rows), "fitted": sum(row["fitted"] for row in rows)}


def report(results: dict) -> None:
    """Every case's request, calls and last reply, then the totals."""
    for row in results["cases"]:
        answer = {None: "-", True: "right", False: "WRONG"}[row["answer_has"]]
        print(f"\n[{row['case']}] (calls {'right' if row['right_calls'] else 'WRONG'}, answer {answer}) "
              f"tools offered: {', '.join(row['tools']) or 'none'}")
        print("   user: " + " / ".join(row["turns"]))
        for call in row["calls"]:
            print(f"   call: {call['name']}({json.dumps(call['input'])})")
        print(f"   last reply ({row['stop_reason']}): {row['reply']!r}")
        for note in row["context_notes"]:
            print(f"   to fit the window: {note}")
    n = results["n"]
    print(f"\n{results['model']} (window {results['context_window']}): right calls {results['right_calls']}/{n}, "
          f"answers {results['answers_right']}/{results['answers_checked']}, ended their turn "
          f"{results['ends_turn']}/{n}, fitted {results['fitted']}/{n} ({results['seconds']} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="chat", help="chat, base, or a model folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    results = {"model": args.model, **trial(Client(args.model))}
    results["seconds"] = round(time.perf_counter() - start, 1)
    report(results)
    atomic_write(args.out, json.dumps(results, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
