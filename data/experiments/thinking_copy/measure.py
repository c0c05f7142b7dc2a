"""Does the model copy the request's words into its thinking? One checkpoint, four held-out splits.

    python data/experiments/thinking_copy/measure.py --model FOLDER [--n 40] [--show 5]

Before a call the skill data's assistant thinks the request's subject words ("tide level"), and
the tool's name is chosen given them (``llmkit.chat.constrained``), so a wrong word there costs the
call. This script asks a checkpoint (config.json, model.safetensors, tokenizer.json) to write that
thinking, greedily, for ``--n`` ``tool`` conversations of each split, and counts exact copies:

    unseen_values                 training phrasings and tools, held-out values (the baseline)
    unseen_phrasings              held-out phrasings
    unseen_tools                  held-out tool words
    unseen_phrasings_and_tools    both (the evals' hardest split)

It prints the four fractions and ``--show`` misses per split (the request, the thinking wanted,
the thinking written), and writes them to results.json beside this script (``--out`` elsewhere).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from llmkit.chat.template import render
from llmkit.course.skills import make_skills
from llmkit.generation.generate import generate
from llmkit.model.weights import load_model

SPLITS = ("unseen_values", "unseen_phrasings", "unseen_tools", "unseen_phrasings_and_tools")
THINKING_TOKENS = 24


def written_thinking(model, tokenizer, conversation) -> str:
    """The thinking the model writes after the user's request, greedy, without its markers."""
    ids = render(tokenizer, conversation.prompt, tools=conversation.definitions, system=conversation.system).ids
    end = tokenizer.special_tokens["<|end_thinking|>"]
    text = generate(model, ids, max_new_tokens=THINKING_TOKENS, stop_tokens=[end], tokenizer=tokenizer).samples[0].text
    return text.replace("<|thinking|>", "").replace("<|end_thinking|>", "").strip()


def measure(folder: Path, n: int, seed: int = 11) -> dict:
    model, tokenizer = load_model(folder)
    model.eval()
    results = {}
    for split in SPLITS:
        rows = []
        for conversation in make_skills(n, split=split, seed=seed, kinds=["tool"]):
            wanted = conversation.messages[1]["content"][0]["thinking"]
            rows.append({"request": conversation.prompt[-1]["content"], "wanted": wanted,
                         "written": written_thinking(model, tokenizer, conversation)})
        copied = sum(r["wanted"] == r["written"] for r in rows)
        results[split] = {"copied": copied, "n": n, "fraction": round(copied / n, 3),
                          "misses": [r for r in rows if r["wanted"] != r["written"]]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--n", type=int, default=40, help="tool conversations per split")
    parser.add_argument("--show", type=int, default=5, help="misses printed per split")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    results = measure(args.model, args.n)
    for split, r in results.items():
        print(f"{split:<28} {r['copied']:>3}/{r['n']} thinking copied exactly")
        for miss in r["misses"][:args.show]:
            print(f"    {miss['request'][:90]!r}\n      wanted {miss['wanted']!r}, wrote {miss['written']!r}")
    print(f"{time.perf_counter() - started:.0f} s")
    args.out.write_text(json.dumps({"model": args.model.name, "n": args.n, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
