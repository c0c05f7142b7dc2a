"""Does a held-out request go better when its rare words are swapped for words the base knows?

    python data/experiments/open_forms/known_words.py [--model chat] [--per-kind 200] [--threads 2]

``form_words.py`` found that the held-out request forms lean on words the base barely read in
pretraining ("tally", "crunch", "browse": at most ten times in the recipe's corpus). If that is
why a new wording costs the arguments, the same request with those words replaced by words the
base read often, and that no training phrasing uses, should do better. ``PAIRS`` holds, for the
held-out forms of the four course intents that have such a word, the same form with only those
words changed ("Tally up the {letter}'s within {word}." -> "Cast up the {letter}'s within
{word}."). ``tests/test_open_forms_experiment.py`` checks the words on both sides.

This replays the evals' ``unseen_phrasings`` conversations (held-out phrasings, training tool
words, new values; the recipe's evals seed) of each kind, keeps those written from a paired form,
and runs each twice, greedy: as written, and with the form's rare words replaced. Nothing else in
the conversation changes. Writes known_words.json beside this script (``--out`` elsewhere).
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
from llmkit.course.skill_scores import args_exact, batched_runs, tool_call_valid
from llmkit.course.skills import SkillConversation, make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

SPLIT = "unseen_phrasings"
PAIRS = {
    "weather": {
        "Umbrella or sunglasses in {city} {day}?": "Umbrella or cloak in {city} {day}?",
        "Is rain on the cards for {city} {day}?": "Is rain on the wind for {city} {day}?",
        "Give me {city}'s outlook for {day}.": "Give me {city}'s fortune for {day}.",
        "Am I getting soaked in {city} {day}?": "Am I getting cold in {city} {day}?",
    },
    "letters": {
        "Tally up the {letter}'s within {word}.": "Cast up the {letter}'s within {word}.",
        "What's the {letter} tally for {word}?": "What's the {letter} score for {word}?",
        "Spell out {word} and total its {letter}'s.": "Write out {word} and total its {letter}'s.",
        "Give me the count of {letter} inside {word}.": "Give me the count of {letter} within {word}.",
    },
    "arithmetic": {"Crunch {expression}.": "Cast {expression}."},
    "search": {"Dig up notes on {topic}.": "Seek notes on {topic}.", "Browse for {topic}.": "Seek for {topic}."},
}
SLOT = re.compile(r"\{(\w+)\}")


def form_pattern(form: str) -> re.Pattern:
    """A pattern that finds ``form`` in a request whatever its slots hold and however it is cased
    (the grammar lower-cases a form after a politeness word, or a whole request now and then)."""
    pieces = SLOT.split(form)  # literal, slot, literal, slot, ..., literal
    parts = [re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(pieces)]
    return re.compile("".join(parts), re.IGNORECASE)


def in_case_of(literal: str, found: str) -> str:
    """``literal`` cased as ``found`` was: all lower, all upper, or lower-case first letter."""
    if not literal or found.islower():
        return literal.lower()
    if found.isupper():
        return literal.upper()
    return literal[0].lower() + literal[1:] if found[:1].islower() else literal


def reworded(text: str, form: str, known: str) -> str | None:
    """``text`` with the request written from ``form`` rewritten from ``known`` (the slots' values
    kept), or None when ``form`` is not in ``text``."""
    match = form_pattern(form).search(text)
    if match is None:
        return None
    found_literals = _literals(match)
    pieces = SLOT.split(known)  # literal, slot, literal, slot, ..., literal
    new = "".join(match.group(p) if i % 2 else in_case_of(p, found_literals) for i, p in enumerate(pieces))
    return text[:match.start()] + new + text[match.end():]


def _literals(match: re.Match) -> str:
    """The text a match found outside its slots: what tells how the form was cased."""
    spans = sorted(match.span(name) for name in match.re.groupindex)
    out, at = [], match.start()
    for start, end in spans:
        out.append(match.string[at:start])
        at = end
    out.append(match.string[at:match.end()])
    return "".join(out)


def paired_conversations(kind: str, per_kind: int, seed: int) -> list[tuple[str, SkillConversation, SkillConversation]]:
    """(the held-out form, the conversation as written, the same with the form's rare words replaced)
    for each ``SPLIT`` conversation of ``kind`` written from a paired form."""
    out = []
    for spec in make_skills(per_kind, split=SPLIT, seed=seed, kinds=[kind]):
        text = spec.messages[0]["content"]
        for form, known in PAIRS[kind].items():
            new = reworded(text, form, known)
            if new is not None:
                messages = [{**spec.messages[0], "content": new}, *spec.messages[1:]]
                out.append((form, spec, replace(spec, messages=messages)))
                break
    return out


def measure(model: str, per_kind: int) -> dict:
    """Valid calls and exact arguments per paired form, as written and with known words, greedy with
    the recipe's evals settings; ``model`` is a shipped model's name or a folder, as ``Client`` takes it."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    client = Client(model)
    started = time.perf_counter()
    rows = [(kind, *row) for kind in PAIRS for row in paired_conversations(kind, per_kind, settings["seed"])]
    specs = [spec for _, _, written, known in rows for spec in (written, known)]
    outcomes = batched_runs(client, specs, batch=settings["batch"], max_tokens=settings["max_tokens"])
    by_form: dict = {}
    for i, (kind, form, written, known) in enumerate(rows):
        entry = by_form.setdefault(kind, {}).setdefault(form, {"known": PAIRS[kind][form], "n": 0, "as_written": {
            "valid": 0, "exact": 0}, "known_words": {"valid": 0, "exact": 0}})
        entry["n"] += 1
        for version, spec, (transcript, _) in (("as_written", written, outcomes[2 * i]),
                                               ("known_words", known, outcomes[2 * i + 1])):
            entry[version]["valid"] += bool(tool_call_valid(spec, transcript))
            entry[version]["exact"] += bool(args_exact(spec, transcript))
    totals = {version: {score: sum(e[version][score] for forms in by_form.values() for e in forms.values())
                        for score in ("valid", "exact")} for version in ("as_written", "known_words")}
    return {"split": SPLIT, "n": len(rows), "totals": totals, "by_form": by_form,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="chat", help="a shipped model's name, or a model folder (a path)")
    parser.add_argument("--per-kind", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("known_words.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.model, args.per_kind)
    print(f"{result['n']} conversations of {SPLIT} written from a paired form: valid call / exact arguments")
    for kind, forms in result["by_form"].items():
        for form, e in forms.items():
            print(f"  {kind:10s} n {e['n']:3d}  {e['as_written']['valid']:3d} / {e['as_written']['exact']:3d}  "
                  f"-> {e['known_words']['valid']:3d} / {e['known_words']['exact']:3d}   {form!r} -> {e['known']!r}")
    t = result["totals"]
    print(f"  all            {t['as_written']['valid']} / {t['as_written']['exact']} -> "
          f"{t['known_words']['valid']} / {t['known_words']['exact']}  of {result['n']}")
    command = "python data/experiments/open_forms/known_words.py " + " ".join(sys.argv[1:])
    atomic_write(args.out, json.dumps({"command": command, "model": args.model, "per_kind": args.per_kind,
                                       **result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
