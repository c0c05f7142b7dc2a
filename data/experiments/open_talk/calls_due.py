"""When a call is due, does the model write one? And when none is due, does it hold back?

    python data/experiments/open_talk/calls_due.py --model open_enums=RUN_ENUMS/sft_skills/shipped \
        --model open_talk=RUN/sft_skills/shipped [--per-kind 50] [--splits ...] [--kinds ...] [--threads 2] \
        [--show refused]

``compare.py``'s ``tool_call_valid`` scores a call left out and a call written wrong alike. This
replays the same conversations (the recipe's evals settings and seed, greedy through the client,
``--per-kind`` per kind of the training mix, or of ``--kinds``) and sorts each one by what the
model did:

* a call was due (every kind but ``missing``, ``memory``, ``chitchat``, ``which``, ``not_offered``):
  ``valid`` (every call due written, all valid: ``compare.py``'s ``tool_call_valid``, except that
  for ``multi`` it also counts one valid call where two were due),
  ``invalid`` (written, one or more not valid), ``refused`` (fewer calls than due, and the reply
  says no tool gives it, the ``missing`` kind's answer), ``other`` (fewer calls, any other reply);
* no call was due: ``held_back`` (no call) or ``called``.

So a falling valid-call rate shows up as either calls written wrong or restraint overshooting.
``--show OUTCOME`` prints the user's request of every conversation that ended that way;
``--by-form`` also counts the outcomes by the phrasing form the request was written from (matched
against the grammar's forms for the kind and split; "?" where a typo or casing hides it).
Writes calls_due.json beside this script (``--out`` elsewhere), with each model's seconds.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.phrasing import INTENTS, grammar
from llmkit.course.skill_scores import batched_runs, calls_in, final_text, tool_call_valid
from llmkit.course.skills import EVAL_SPLITS, KINDS, MIX, SkillConversation, make_skills
from llmkit.files import atomic_write
from llmkit.paths import data_path

DUE = ("valid", "invalid", "refused", "other")
NOT_DUE = ("held_back", "called")
REFUSAL = re.compile(r"none of my tools|no tool for|don't have a tool|have no \w+ tool", re.IGNORECASE)


def outcome(spec: SkillConversation, transcript: list[dict]) -> str:
    """What the model did in one conversation: one of ``DUE`` or ``NOT_DUE``."""
    calls = calls_in(transcript)
    if not spec.expected.calls:
        return "called" if calls else "held_back"
    if len(calls) >= len(spec.expected.calls):
        return "valid" if tool_call_valid(spec, transcript) else "invalid"
    return "refused" if REFUSAL.search(final_text(transcript)) else "other"


def form_of(request: str, kind: str, split: str) -> str:
    """The grammar form ``request`` was written from, or "?" (a kind without forms, or a typo in it)."""
    for form in grammar(kind, split).forms if kind in INTENTS else ():
        pattern = re.sub(r"\\\{\w+\\\}", ".+", re.escape(form))
        if re.search(pattern, request, re.IGNORECASE | re.DOTALL):
            return form
    return "?"


def tally(client: Client, split: str, per_kind: int, kinds: list[str], show: str | None = None,
          by_form: dict | None = None) -> dict[str, dict[str, int]]:
    """Per kind: how many of ``split``'s conversations end in each outcome (printing ``show``'s
    requests; counting each form's outcomes into ``by_form`` when given)."""
    settings = json.loads(data_path("models", "recipe", "evals.json").read_text())
    specs = {kind: make_skills(per_kind, split=split, seed=settings["seed"], kinds=[kind]) for kind in kinds}
    flat = [spec for kind_specs in specs.values() for spec in kind_specs]
    runs = iter(batched_runs(client, flat, batch=settings["batch"], max_tokens=settings["max_tokens"]))
    counts = {}
    for kind, kind_specs in specs.items():
        outcomes = [outcome(spec, next(runs)[0]) for spec in kind_specs]
        for spec, name in zip(kind_specs, outcomes):
            if name == show:
                print(f"  {show} {kind}: {spec.prompt[-1]['content']!r}")
            if by_form is not None:
                forms = by_form.setdefault(kind, {})
                form = forms.setdefault(form_of(spec.prompt[-1]["content"], kind, split), Counter())
                form[name] += 1
        found = Counter(outcomes)
        counts[kind] = {name: found[name] for name in (DUE if kind_specs[0].expected.calls else NOT_DUE)}
    return counts


def print_table(results: dict[str, dict], split: str, kinds: list[str]) -> None:
    names = list(results)
    print(f"{split}: per kind, " + " / ".join(DUE) + " or " + " / ".join(NOT_DUE) + "  (" + " | ".join(names) + ")")
    for kind in kinds:
        cells = [" / ".join(str(n) for n in results[name][split][kind].values()) for name in names]
        print(f"  {kind:<12} " + " | ".join(cells))


def print_forms(forms: dict[str, dict], split: str, kinds: list[str]) -> None:
    """Each form's outcomes, one line per form and model."""
    for kind in kinds:
        for form in sorted({f for per_model in forms.values() for f in per_model[split].get(kind, {})}):
            for name, per_model in forms.items():
                found = per_model[split].get(kind, {}).get(form, {})
                print(f"    {kind:<10} {name:<12} {dict(found)}  {form!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER", required=True)
    parser.add_argument("--per-kind", type=int, default=50)
    parser.add_argument("--splits", nargs="+", default=list(EVAL_SPLITS), choices=EVAL_SPLITS)
    parser.add_argument("--kinds", nargs="+", default=list(MIX), choices=KINDS, help="default: the training mix's")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--show", choices=DUE + NOT_DUE, help="print the requests that ended this way")
    parser.add_argument("--by-form", action="store_true", help="count outcomes per phrasing form too")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("calls_due.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = dict(spec.split("=", 1) for spec in args.model)
    results, seconds, forms = {}, {}, {}
    for name, folder in models.items():
        started, client = time.perf_counter(), Client(folder)
        forms[name] = {split: {} if args.by_form else None for split in args.splits}
        results[name] = {split: tally(client, split, args.per_kind, args.kinds, args.show, forms[name][split])
                         for split in args.splits}
        seconds[name] = round(time.perf_counter() - started, 1)
    for split in args.splits:
        print_table(results, split, args.kinds)
        if args.by_form:
            print_forms(forms, split, args.kinds)
    command = "python data/experiments/open_talk/calls_due.py " + " ".join(sys.argv[1:])
    report = {"command": command, "per_kind": args.per_kind, "kinds": args.kinds, "models": results,
              "seconds": seconds}
    if args.by_form:
        report["by_form"] = forms
    atomic_write(args.out, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
