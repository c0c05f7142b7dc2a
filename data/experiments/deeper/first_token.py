"""Where does a missed argument go? The model's first token of each value, when it is wrong.

    python data/experiments/deeper/first_token.py --model shipped=data/models/skills \
        --model deeper=RUN/sft_skills/shipped [--n 100] [--show 5] [--threads 2]

Teacher-forced, like ``forced_scores.argument_copy``: every token before an argument value is
given, and the model's greedy next token is compared with the value's first token. The values
are those of the first call in ``--n`` conversations of the tool-calling kinds (seed 11, the
conversations ``word_base/compare.py`` copies from) whose tokens occur in the prompt, so a model
can copy them. A wrong first token is put in one of three groups:

* ``request_token``: a token of the user's message: mostly the model copied, but the wrong word
  (a token the message merely holds, say a capital "M", counts here too; ``--show`` prints them);
* ``elsewhere``: a token of the prompt outside that message (a tool line, the system prompt, or
  an earlier turn of an errand);
* ``not_in_prompt``: a token the prompt does not hold, so the model wrote from memory.

If most misses are request tokens, the model has the copy and lacks the reading: it does not
know which word of an unfamiliar sentence is the value. It writes first_token.json beside this
script (``--out`` elsewhere).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.forced_scores import TOOL_CALLING_KINDS, argument_values
from llmkit.course.skills import EVAL_SPLITS, make_skills
from llmkit.files import atomic_write

SEED = 11
GROUPS = ("right", "request_token", "elsewhere", "not_in_prompt")


def user_message_span(tokenizer, ids: list[int], before: int) -> range:
    """Positions of the last user message that starts before position ``before``."""
    user = tokenizer.special_tokens["<|user|>"]
    start = max(i for i in range(before) if ids[i] == user) + 1
    end = next(i for i in range(start, before) if ids[i] in tokenizer.special_tokens.values())
    return range(start, end)


def miss_group(tokenizer, ids: list[int], position: int, predicted: int) -> str:
    """Which group the model's token ``predicted`` at ``position`` (the value's first) falls in."""
    if predicted == ids[position]:
        return "right"
    request = user_message_span(tokenizer, ids, position)
    if predicted in (ids[i] for i in request):
        return "request_token"
    return "elsewhere" if predicted in ids[:position] else "not_in_prompt"


def first_tokens(model, tokenizer, split: str, n: int, show: int = 0) -> dict[str, int]:
    """How many first tokens of ``split``'s copyable values fall in each of ``GROUPS``; the first
    ``show`` misses are printed with the user's message."""
    counts = Counter({group: 0 for group in GROUPS})
    specs = make_skills(n, split=split, seed=SEED, kinds=list(TOOL_CALLING_KINDS))
    for _spec, ids, positions, group in argument_values(tokenizer, specs):
        if group != "in_prompt":
            continue
        first = positions[0]
        with torch.no_grad():
            logits = model(torch.tensor([ids[:first]], device=next(model.parameters()).device))[0, -1]
        predicted = int(logits.argmax())
        group = miss_group(tokenizer, ids, first, predicted)
        counts[group] += 1
        if group != "right" and show > 0:
            show -= 1
            request = tokenizer.decode([ids[i] for i in user_message_span(tokenizer, ids, first)])
            print(f"  {split}: {request!r} -> {tokenizer.decode([predicted])!r} "
                  f"instead of {tokenizer.decode([ids[first]])!r} ({group})")
    return dict(counts)


def arguments(description: str, out: Path, show: bool) -> tuple[argparse.Namespace, dict[str, str]]:
    """The command line of a first-token script: its arguments and ``{name: model folder}``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER", required=True)
    parser.add_argument("--n", type=int, default=100, help="conversations per split")
    if show:
        parser.add_argument("--show", type=int, default=0, help="print this many misses per split and model")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    return args, dict(spec.split("=", 1) for spec in args.model)


def main() -> None:
    args, models = arguments(__doc__.splitlines()[0], Path(__file__).with_name("first_token.json"), show=True)
    results = {}
    for name, folder in models.items():
        client = Client(folder)
        model = client.model.eval()
        results[name] = {split: first_tokens(model, client.tokenizer, split, args.n, args.show)
                         for split in EVAL_SPLITS}
    report(results, GROUPS, "data/experiments/deeper/first_token.py", args.n, args.out)


def report(results: dict, groups: tuple[str, ...], script: str, n: int, out: Path) -> None:
    """Print ``results`` (model -> split -> group -> count) as a table, and write them to ``out``
    with the command that made them."""
    print("first token of a copyable value: " + " / ".join(groups) + "  (" + " | ".join(results) + ")")
    for split in EVAL_SPLITS:
        cells = [" / ".join(str(counts[split][g]) for g in groups) for counts in results.values()]
        print(f"  {split:<28} " + " | ".join(cells))
    command = f"python {script} " + " ".join(sys.argv[1:])
    atomic_write(out, json.dumps({"command": command, "n": n, "seed": SEED, "models": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
