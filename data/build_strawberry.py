"""The strawberry experiment, measured: can a small model count letters, and what fixes it?

Source note 002 claims: a model can *spell* a word it only sees as tokens, but counting a
letter *directly* (the answer within the first few tokens) fails more often; writing the
letters out with a running count first (reasoning tokens), or calling a ``count_letters`` tool,
fixes it, at a price in output tokens.

We test it on our own base model. Four short fine-tunes, each from the shipped base model, one
per answer format (``llmkit.course.strawberry.strawberry_tasks``). Half the training items use the
training words (``llmkit.course.conversations.words("train")``), half a freshly invented word of 2-8 of
the same syllables (never a held-out word), so no format can pass by memorising 52 words:

- ``direct``:  "How many r's are in strawberry?" -> "strawberry has 3 r's."
- ``spelled``: same question -> thinking "s t r(1) a w b e r(2) r(3) y" -> the answer
- ``tool``:    same question -> call count_letters -> the answer from its result
- ``spell``:   the probe "Spell strawberry." -> "s t r a w b e r r y" (no counting)

Each is then scored greedily on the *held-out* words (real words it never trained on and
invented ones such as "ungarbarrylirryburirira"): accuracy, and the mean number of output
tokens it spent (stop tokens included, tool-call turns included).

    python data/build_strawberry.py            # writes data/strawberry/results.json (train_minutes: the time each took)
    python data/build_strawberry.py --steps 40 --formats direct   # a quick look
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llmkit.chat.parse import parse_assistant  # noqa: E402
from llmkit.chat.template import render, stop_tokens  # noqa: E402
from llmkit.course.conversation_data import REAL_WORDS  # noqa: E402
from llmkit.course.strawberry import STRAWBERRY_FORMATS, strawberry_tasks  # noqa: E402
from llmkit.course.evals import numbers_in, run_conversation  # noqa: E402
from llmkit.course.recipe import ChatFinetuneConfig, finetune_chat  # noqa: E402
from llmkit.generation.generate import generate  # noqa: E402

RESULTS = REPO / "data" / "strawberry" / "results.json"
SHOWCASE = "ungarbarrylirryburirira"


def heldout_items(fmt: str, seeds: tuple[int, ...]) -> list:
    """Every held-out word once per seed (a different letter each time), in format ``fmt``."""
    return [task for seed in seeds for task in strawberry_tasks(fmt, split="heldout", seed=seed)]


def answer_count(text: str) -> int | None:
    """The first whole number in the answer text, or None."""
    found = numbers_in(text)
    try:
        return int(found[0]) if found else None
    except ValueError:
        return None


def spelled_letters(thinking: str) -> str:
    """'s t r(1) a w' -> 'straw': the letters a spelled-out count wrote, running counts removed."""
    return "".join(re.sub(r"\(\d+\)", "", thinking).split())


def score_item(model, tokenizer, fmt: str, task) -> dict:
    facts = task.expected.facts
    if fmt == "tool":
        transcript = run_conversation(model, tokenizer, task.prompt, tools=task.tools, system=task.system)
        text, thinking = transcript.final_text, ""
        output_tokens = transcript.output_tokens
        calls = transcript.tool_calls
        extra = {"called_tool": bool(calls) and calls[0].get("input") == task.expected.tool_input}
    else:
        stops = stop_tokens(tokenizer)
        prompt = render(tokenizer, task.prompt, tools=task.tools, system=task.system).ids
        generation = generate(model, prompt, max_new_tokens=min(160, model.config.context_length - len(prompt)),
                              stop_tokens=stops.end_turn, tool_stop_tokens=stops.tool_use)
        blocks = parse_assistant(tokenizer, generation.tokens)
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        thinking = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
        output_tokens = len(generation.tokens)
        extra = {}
    if fmt == "spell":
        correct = text.strip() == facts["spelling"]
    else:
        correct = answer_count(text) == facts["count"]
    if fmt == "spelled":
        extra["spelled_right"] = spelled_letters(thinking) == facts["word"]
    return {"word": facts["word"], "letter": facts["letter"], "count": facts["count"], "correct": correct,
            "output_tokens": output_tokens, "text": text, "thinking": thinking, **extra}


def summarise(items: list[dict]) -> dict:
    real = set(REAL_WORDS["heldout"])

    def accuracy(rows):
        return round(sum(r["correct"] for r in rows) / len(rows), 3) if rows else None

    summary = {"n": len(items), "accuracy": accuracy(items),
               "accuracy_real_words": accuracy([r for r in items if r["word"] in real]),
               "accuracy_invented_words": accuracy([r for r in items if r["word"] not in real]),
               "mean_output_tokens": round(sum(r["output_tokens"] for r in items) / len(items), 1)}
    counts = [r["count"] for r in items]
    summary["guess_most_common_count"] = round(max(counts.count(c) for c in set(counts)) / len(counts), 3)
    if "spelled_right" in items[0]:
        summary["spelled_right"] = round(sum(r["spelled_right"] for r in items) / len(items), 3)
    if "called_tool" in items[0]:
        summary["called_tool_right"] = round(sum(r["called_tool"] for r in items) / len(items), 3)
    summary["showcase"] = [r for r in items if r["word"] == SHOWCASE]
    return summary


def run(fmt: str, steps: int, batch_size: int, threads: int, seeds: tuple[int, ...], fresh: float) -> dict:
    cfg = ChatFinetuneConfig(base_model="base", data=f"strawberry:{fmt}", out_dir=f"runs/strawberry/{fmt}",
                         batch_size=batch_size, max_steps=steps, learning_rate=1.5e-3, min_learning_rate=1e-4,
                         warmup_steps=max(1, steps // 20), eval_every=steps, checkpoint_every=steps,
                         heldout_examples=32, threads=threads, seed=1337, fresh_entities=fresh)
    started = time.perf_counter()
    model = finetune_chat("sft", cfg, progress=False)
    train_seconds = time.perf_counter() - started
    from llmkit.model.weights import load_model
    _, tokenizer = load_model("base")
    model.eval()
    with torch.no_grad():
        items = [score_item(model, tokenizer, fmt, task) for task in heldout_items(fmt, seeds)]
    log = [json.loads(line) for line in (Path(cfg.out_dir) / "train_log.jsonl").read_text().splitlines()]
    return {"format": fmt, "steps": steps, "batch_size": batch_size, "fresh_words": fresh, "train_minutes": round(train_seconds / 60, 1),
            "heldout_loss": [r for r in log if r["kind"] == "eval"][-1]["heldout_loss"],
            **summarise(items), "items": items}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", nargs="+", default=["direct", "tool", "spell", "spelled"],
                        choices=STRAWBERRY_FORMATS)
    parser.add_argument("--steps", type=int, default=200, help="fine-tuning steps per format (default 200)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=2, help="held-out passes over the word list (default 2)")
    parser.add_argument("--fresh", type=float, default=0.5,
                        help="fraction of training items about a freshly invented word (default 0.5)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--summarise-only", action="store_true", help="only recompute the summaries in --out")
    args = parser.parse_args()
    torch.manual_seed(0)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(out.read_text()) if out.is_file() else {"formats": {}}
    if not args.summarise_only:
        results["command"] = " ".join(["python data/build_strawberry.py", *sys.argv[1:]])
    if args.summarise_only:  # recompute the summaries from the stored items (no training)
        for fmt, result in results["formats"].items():
            result.update(summarise(result["items"]))
        out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        return
    for fmt in args.formats:
        result = run(fmt, args.steps, args.batch_size, args.threads, tuple(range(args.seeds)), args.fresh)
        results["formats"][fmt] = result
        out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        print(f"{fmt:>8}: accuracy {result['accuracy']:.3f} (real {result['accuracy_real_words']}, "
              f"invented {result['accuracy_invented_words']}), {result['mean_output_tokens']} output tokens, "
              f"{result['train_minutes']} min", flush=True)


if __name__ == "__main__":
    main()
