"""Which part of the user's message does a wrong first token come from: the talk or the request?

    python data/experiments/open_talk/by_piece.py --model open_enums=RUN_ENUMS/sft_skills/shipped \
        --model open_talk=RUN/sft_skills/shipped [--n 100] [--threads 2]

The same teacher-forced first tokens as ``../deeper/first_token.py`` (its conversations, its
groups). A ``request_token`` miss is split once more, by where in the message the token stands:

* ``talk``: only inside the grammar's talk around the request (an opener such as "Right then,",
  a politeness word, context before or after, a sign-off, a chatter sentence);
* ``form``: anywhere else, mostly the request's own words.

A token found in both counts as ``form``, and a talk piece a typo broke is not found, so ``talk``
is a floor. Open talk is aimed at the first group. Writes by_piece.json beside this script.
"""
from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import torch

from llmkit.chat.client import Client
from llmkit.course.phrasing import phrasing_split
from llmkit.course.phrasing_pools import HELDOUT, TRAIN
from llmkit.course.forced_scores import TOOL_CALLING_KINDS, argument_values
from llmkit.course.skills import EVAL_SPLITS, make_skills

_spec = importlib.util.spec_from_file_location("first_token", Path(__file__).parent.parent / "deeper" / "first_token.py")
first_token = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_token)

GROUPS = ("right", "talk", "form", "elsewhere", "not_in_prompt")


def talk_patterns(split: str) -> list[re.Pattern]:
    """Case-blind patterns for every talk piece of ``split``'s grammar, end punctuation optional
    (``phrasing.vary`` changes it) and a chatter sentence's ``{thing}`` matching any words."""
    pieces = TRAIN if phrasing_split(split) == "train" else HELDOUT
    texts = [*pieces.openers, *pieces.polite, *pieces.closers, *pieces.chatter,
             *(t for group in (pieces.before, pieces.after) for texts in group.values() for t in texts)]
    patterns = []
    for text in texts:
        literal = re.escape(text.rstrip(".?!:,")).replace(r"\{thing\}", r"[\w' -]+?")
        patterns.append(re.compile(literal, re.IGNORECASE))
    return patterns


def talk_positions(tokenizer, ids: list[int], request: range, split: str) -> set[int]:
    """The positions of ``request`` whose token lies inside a talk piece of the message."""
    starts, text = [], ""
    for i in request:
        starts.append(len(text))
        text += tokenizer.decode([ids[i]])
    spans = [m.span() for p in talk_patterns(split) for m in p.finditer(text)]
    ends = starts[1:] + [len(text)]
    return {i for i, start, end in zip(request, starts, ends) if any(a < end and start < b for a, b in spans)}


def piece_group(tokenizer, ids: list[int], position: int, predicted: int, split: str) -> str:
    """``first_token.miss_group``, with a request token sorted into ``talk`` or ``form``."""
    group = first_token.miss_group(tokenizer, ids, position, predicted)
    if group != "request_token":
        return group
    request = first_token.user_message_span(tokenizer, ids, position)
    talk = talk_positions(tokenizer, ids, request, split)
    holding = [i for i in request if ids[i] == predicted]
    return "talk" if all(i in talk for i in holding) else "form"


def by_piece(model, tokenizer, split: str, n: int) -> dict[str, int]:
    """How many first tokens of ``split``'s copyable values fall in each of ``GROUPS``."""
    counts = Counter({group: 0 for group in GROUPS})
    specs = make_skills(n, split=split, seed=first_token.SEED, kinds=list(TOOL_CALLING_KINDS))
    device = next(model.parameters()).device
    for _spec, ids, positions, group in argument_values(tokenizer, specs):
        if group != "in_prompt":
            continue
        with torch.no_grad():
            predicted = int(model(torch.tensor([ids[:positions[0]]], device=device))[0, -1].argmax())
        counts[piece_group(tokenizer, ids, positions[0], predicted, split)] += 1
    return dict(counts)


def main() -> None:
    args, models = first_token.arguments(__doc__.splitlines()[0], Path(__file__).with_name("by_piece.json"),
                                         show=False)
    results = {}
    for name, folder in models.items():
        client = Client(folder)
        results[name] = {split: by_piece(client.model.eval(), client.tokenizer, split, args.n)
                         for split in EVAL_SPLITS}
    first_token.report(results, GROUPS, "data/experiments/open_talk/by_piece.py", args.n, args.out)


if __name__ == "__main__":
    main()
