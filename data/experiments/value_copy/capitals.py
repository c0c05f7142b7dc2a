"""Does the chat model take a capitalised word for the city? The same weather requests, as written
and with every other word lower-cased.

    python data/experiments/value_copy/capitals.py [--per-kind 100] [--threads 2]

`compare.py --show weather` found that most cities copy mode still gets wrong are the
capitalised first word of a sentence of the talk around the request ("Much obliged.", "Stuck
behind a bakery truck."). If capitals are the model's cue for a city, taking them from every
word but the city should bring most of those back. Every word but the city is lower-cased, so an
upper-case request becomes a lower-case one, a casing the training phrasings also have. Held-out
weather requests (``unseen_phrasings_and_tools``, the recipe's evals seed), greedy,
``constrain_tools="copy"``, the first turn only; writes capitals.json beside this script.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.chat.value_copy import EDGE_PUNCTUATION
from llmkit.course.skill_scores import batched_runs, calls_in, same_value
from llmkit.course.skills import make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

WORD = re.compile(r"\S+")


def decapitalised(text: str, keep: set[str]) -> str:
    """``text`` with every word lower-cased except the words in ``keep``, also where punctuation or
    a possessive is attached to them ("Mumbai's")."""
    def lowered(match: re.Match) -> str:
        word = match.group(0)
        bare = word.strip(EDGE_PUNCTUATION)
        return word if bare in keep or bare.split("'")[0] in keep else word.lower()

    return WORD.sub(lowered, text)


def with_request(spec, text: str):
    """``spec`` with its last typed message replaced by ``text``."""
    messages = [dict(m) for m in spec.messages]
    typed = max(i for i, m in enumerate(messages) if m["role"] == "user" and isinstance(m["content"], str))
    messages[typed]["content"] = text
    return replace(spec, messages=messages)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    client = Client("chat")
    specs = make_skills(args.per_kind, split="unseen_phrasings_and_tools", seed=settings["seed"], kinds=["weather"])
    lowered = [with_request(spec, decapitalised(spec.prompt[-1]["content"], {spec.expected.calls[0][1]["city"]}))
               for spec in specs]
    result = {"command": "python data/experiments/value_copy/capitals.py " + " ".join(argv or sys.argv[1:]),
              "n": len(specs), "versions": {}}
    started = time.perf_counter()
    for version, batch in (("as_written", specs), ("decapitalised", lowered)):
        outcomes = batched_runs(client, batch, batch=settings["batch"], max_tokens=settings["max_tokens"],
                                constrain_tools="copy")
        firsts = [calls_in(transcript)[:1] for transcript, _ in outcomes]
        cities = [spec.expected.calls[0][1]["city"] for spec in specs]
        result["versions"][version] = {
            "right_city": sum(bool(f) and f[0].get("input", {}).get("city") == c for f, c in zip(firsts, cities)),
            "exact_first_call": sum(bool(f) and same_value(f[0].get("input"), s.expected.calls[0][1])
                                    for f, s in zip(firsts, specs)),
            "example": batch[5].prompt[-1]["content"]}
        print(version, result["versions"][version], flush=True)
    result["seconds"] = round(time.perf_counter() - started, 1)
    atomic_write(Path(__file__).with_name("capitals.json"), json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
