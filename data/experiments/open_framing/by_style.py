"""Teacher-forced argument copying, grouped by how the user tied the value to its parameter.

    python data/experiments/open_framing/by_style.py --model shipped=data/models/skills \
        [--model open=RUN/sft_skills/shipped] [--n 150] [--threads 2]

For each argument value of the first call in ``--n`` conversations of the generated-tool kinds
(``tool``, ``errands``, ``multi``; seed 11) on four splits (``seen``; ``unseen_tools``, held-out
tool words; ``unseen_phrasings``, held-out phrasings; ``unseen_phrasings_and_tools``, both; all
but ``seen`` with held-out values), it finds the argument style the user's message says it in
("rate set to 49" is the training style ``{words} set to {value}``, "rate being 49" the held-out
``{words} being {value}``) and reports, per style, how often the model writes the value's first
token right and the whole value right, every token before it given (``forced_scores.argument_copy``).
Values said in no listed style count under ``other``.

It asks whether a model copies worse after an unfamiliar connector (it learned the connectors of
its training styles, not the parameter's name) or after unfamiliar tool words whatever the
connector (README.md beside this script).
It writes by_style.json beside this script (``--out`` elsewhere).

    python data/experiments/open_framing/by_style.py --group source --splits unseen_values unseen_tools ...

groups the values instead by where the parameter's name came from (``word_source``): a word of
the split's fixed pools, a corpus word, a made-up word, or an enum. ``unseen_values`` and
``unseen_tools`` both hold out the values and differ only in the tool words, so the pair shows
which names cost a copy when they are new. It writes by_source.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.phrasing_pools import HELDOUT, TRAIN
from llmkit.course.forced_scores import argument_values, forced_hits
from llmkit.course.skills import make_skills, splits_of
from llmkit.course.toolgen import TOOL_WORDS, VOCABULARY, pool_words, spoken
from llmkit.files import atomic_write

KINDS = ["tool", "errands", "multi"]
SPLITS = ("seen", "unseen_tools", "unseen_phrasings", "unseen_phrasings_and_tools")
SPLIT_CHOICES = (*SPLITS, "unseen_values")
SEED = 11
STYLES = sorted(set(TRAIN.arg_styles + HELDOUT.arg_styles), key=len, reverse=True)


def style_of(user_text: str, parameter: str, value) -> str:
    """The first (longest) listed style whose filled-in words occur in ``user_text``, else "other"."""
    text = user_text.lower()
    for style in STYLES:
        if style.format(words=parameter.replace("_", " "), value=spoken(value)).lower() in text:
            return style
    return "other"


def request_text(spec) -> str:
    """The user's words the expected call answers: the last user message that is text (an
    errand's expected call is its last turn's, and tool results come as user messages too)."""
    for message in reversed(spec.messages):
        content = message["content"]
        if message["role"] != "user":
            continue
        if isinstance(content, str):
            return content
        texts = [b["text"] for b in content if b.get("type") == "text"]
        if texts:
            return " ".join(texts)
    raise ValueError("the conversation has no user text")


def word_source(spec, parameter: str, value) -> str:
    """Where the parameter's name came from: "enum", "pool", "corpus" or "invented" (made up).
    A modifier before the name ("home_city", "primary_rate") is set aside first."""
    tool_split = splits_of(spec.split)[1]
    schema = next(t for t in spec.tools if t.name == spec.expected.calls[0][0]).definition()["input_schema"]
    if "enum" in schema["properties"][parameter]:
        return "enum"
    for modifier in TOOL_WORDS[tool_split]["modifiers"]:
        if parameter.startswith(modifier + "_"):
            parameter = parameter[len(modifier) + 1:]
    if all(word in pool_words(tool_split) for word in parameter.split("_")):
        return "pool"
    return "corpus" if parameter in VOCABULARY[tool_split] else "invented"


GROUPS = {"style": lambda spec, parameter, value: style_of(request_text(spec), parameter, value),
          "source": word_source}


def copy_by_style(model, tokenizer, specs) -> dict[str, dict[str, float | int]]:
    """Per style: n, first_token (share right) and all_right (share with every token right)."""
    return copy_by(model, tokenizer, specs, GROUPS["style"])


def copy_by(model, tokenizer, specs, key) -> dict[str, dict[str, float | int]]:
    """Per ``key(spec, parameter, value)``: n, first_token and all_right, as ``copy_by_style``."""
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    by_spec: dict[int, list] = defaultdict(list)
    for spec, ids, positions, _ in argument_values(tokenizer, specs):
        by_spec[id(spec)].append((spec, ids, positions))
    for entries in by_spec.values():
        spec = entries[0][0]
        name, arguments = spec.expected.calls[0]
        said = [(k, v) for k, v in arguments.items() if not isinstance(v, bool) and isinstance(v, (str, int, float))]
        if len(said) != len(entries):
            raise AssertionError(f"{len(entries)} value spans for the {len(said)} values of {name}({arguments})")
        for (parameter, value), (_, ids, positions) in zip(said, entries):
            hits = forced_hits(model, ids, positions)
            counts = tally[key(spec, parameter, value)]
            counts[0] += 1
            counts[1] += hits[0]
            counts[2] += all(hits)
    return {style: {"n": n, "first_token": round(first / n, 4), "all_right": round(right / n, 4)}
            for style, (n, first, right) in sorted(tally.items(), key=lambda item: -item[1][0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FOLDER")
    parser.add_argument("--n", type=int, default=150, help="conversations per split")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--group", choices=sorted(GROUPS), default="style")
    parser.add_argument("--splits", nargs="+", choices=sorted(SPLIT_CHOICES), default=list(SPLITS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(__file__).with_name(f"by_{args.group}.json")
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {}
    for spec in args.model:
        name, _, folder = spec.partition("=")
        if not name or not folder:
            parser.error("give each model as NAME=FOLDER")
        start = time.time()
        client = Client(folder)
        model = client.model.eval()
        results[name] = {split: copy_by(model, client.tokenizer,
                                        make_skills(args.n, split=split, seed=SEED, kinds=KINDS), GROUPS[args.group])
                         for split in args.splits}
        results[name]["seconds"] = round(time.time() - start, 1)
    names = list(results)
    for split in args.splits:
        print(f"\n{split}: n, then first token / all right for " + " | ".join(names))
        for key in results[names[0]][split]:
            cells = [results[n][split].get(key, {}) for n in names]
            print(f"  {key:<24} {cells[0].get('n', 0):>4}  " + " | ".join(
                f"{c.get('first_token', float('nan')):.2f} / {c.get('all_right', float('nan')):.2f}" for c in cells))
    report = {"command": "python data/experiments/open_framing/by_style.py " + " ".join(sys.argv[1:]),
              "n": args.n, "seed": SEED, "kinds": KINDS, "group": args.group, "models": results}
    atomic_write(out, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
