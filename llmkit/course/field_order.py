"""The field-order experiment: the model cannot go back, so write the evidence before the conclusion.

A model writes one token at a time, and every token it writes is final. In structured output
that makes the *order of the fields* part of the answer: with the conclusion first, the model must
commit to it before it has written anything that supports it; with the evidence first, the
conclusion is computed from tokens already on the page (source note 001, "The model can't go back").

The task: add up 3-6 numbers from 1 to 9 and report the result through one tool,
``report_total``, whose input holds the running sums (the evidence) and the total (the conclusion).
The two variants differ only in the order of those two fields, in the schema and in the answer::

    evidence_first:   {"running": "3 +7=10 +2=12 +9=21", "total": 21}
    conclusion_first: {"total": 21, "running": "3 +7=10 +2=12 +9=21"}

Evidence first, each step is local: copy the next number of the question, add it to the sum
just written; the total is then a copy of the last sum. Conclusion first, the total is the whole sum
of up to six numbers in one step, which a small model cannot do in its head. (Longer lists
would make the gap wider, but every step of the evidence must be right for its total to be.)

Both variants are fine-tuned from the same base with the same steps and seed on the same
questions (``field_order_examples``), then answer held-out questions (lists of numbers never
seen in training: ``split_of`` of the list decides its split) greedily, with constrained decoding
keeping every call valid JSON for its schema. Only the conclusion, ``total``, is scored.
"""
from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from llmkit.chat.client import Client
from llmkit.chat.tools import ArgumentValidator
from llmkit.checks import check_int
from llmkit.course.conversation_data import Conversation, Expected, check_split, split_of
from llmkit.training.config import FinetuneConfig

ORDERS = ("evidence_first", "conclusion_first")
FIELDS = {"evidence_first": ("running", "total"), "conclusion_first": ("total", "running")}
TOOL_NAME = "report_total"
COUNT_RANGE = (3, 6)  # how many numbers a question adds up
NUMBER_RANGE = (1, 9)  # each number: one digit, so only the sums carry
QUESTIONS = ["Add up {numbers}.", "What is the total of {numbers}?", "Sum these numbers: {numbers}."]
PROPERTIES = {"running": {"type": "string", "description": "Each number added to the sum so far, in order."},
              "total": {"type": "integer", "description": "The sum of all the numbers."}}
TOKENS_PER_NUMBER = 16  # a call spends about 10 tokens per number (6 numbers: about 60); room to spare
SHOWN_PER_ORDER = 5  # replies kept in the results for a reader to look at


def check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return order


def report_tool(order: str) -> dict:
    """The tool definition of ``order``: the same schema, its properties listed in that order.

    JSON-schema properties have no order, but the prompt shows them in the order listed, and the
    answer is trained to follow it."""
    first, second = FIELDS[check_order(order)]
    return {"name": TOOL_NAME, "description": "Report the total of the numbers in the question.",
            "input_schema": {"type": "object", "properties": {first: PROPERTIES[first], second: PROPERTIES[second]},
                             "required": [first, second], "additionalProperties": False}}


def running_sums(numbers: list[int]) -> str:
    """``[3, 7, 2, 9]`` -> ``"3 +7=10 +2=12 +9=21"``: the evidence, one small addition per number.

    Each step writes the number it adds before the sum, so the model copies one number from the
    question and adds it to the sum right before it: nothing to hold in its head."""
    steps, total = [str(numbers[0])], numbers[0]
    for number in numbers[1:]:
        total += number
        steps.append(f"+{number}={total}")
    return " ".join(steps)


def last_sum(running: str) -> int | None:
    """The sum a running text ends on (``"3 +7=10"`` -> 10), or None if it ends on none."""
    found = re.search(r"(?:^|=)(\d+)$", running.strip())
    return int(found.group(1)) if found else None


def numbers_text(numbers: list[int]) -> str:
    """How a list of numbers is written, in questions and as the key that decides its split."""
    return ", ".join(str(n) for n in numbers)


def check_count_range(count_range: tuple[int, int]) -> tuple[int, int]:
    low, high = count_range
    check_int("the fewest numbers", low, minimum=2)
    check_int("the most numbers", high, minimum=low)
    return low, high


def max_reply_tokens(most_numbers: int) -> int:
    """The token budget of one answer: enough for the call of a list of ``most_numbers``."""
    return TOKENS_PER_NUMBER * most_numbers


def draw_numbers(rng: random.Random, split: str, count_range: tuple[int, int] = COUNT_RANGE) -> list[int]:
    """A list of ``count_range`` numbers (3-6 unless asked) from 1 to 9 whose list belongs to
    ``split`` (a SHA-256 hash of the list's text, about 1 in 4 held out), so no held-out question
    is ever a training question."""
    check_split(split)
    while True:
        numbers = [rng.randint(*NUMBER_RANGE) for _ in range(rng.randint(*count_range))]
        if split_of(numbers_text(numbers)) == split:
            return numbers


def field_order_item(order: str, numbers: list[int], question: str, split: str) -> Conversation:
    """One question and the ``report_total`` call that answers it, its fields in ``order``."""
    facts = {"numbers": numbers, "running": running_sums(numbers), "total": sum(numbers)}
    tool_input = {field: facts[field] for field in FIELDS[check_order(order)]}
    messages = [{"role": "user", "content": question.format(numbers=numbers_text(numbers))},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": TOOL_NAME,
                                                   "input": tool_input}]}]
    return Conversation(f"field_order_{order}", split, messages, [report_tool(order)], None,
                        Expected(TOOL_NAME, tool_input, (str(facts["total"]),), facts=facts))


def field_order_items(order: str, n: int, split: str, seed: int,
                      count_range: tuple[int, int] = COUNT_RANGE) -> list[Conversation]:
    """``n`` questions of ``split`` answered in ``order``; the same seed asks the same questions in
    either order, so the two variants train and are tested on exactly the same numbers."""
    rng = random.Random(f"llmkit-field-order|{check_split(split)}|{seed}")
    count_range = check_count_range(count_range)
    items = []
    for _ in range(n):
        numbers = draw_numbers(rng, split, count_range)
        items.append(field_order_item(order, numbers, rng.choice(QUESTIONS), split))
    return items


def field_order_examples(order: str, count_range: tuple[int, int] = COUNT_RANGE
                         ) -> Callable[[int, str, int], list[Conversation]]:
    """The ``(n, split, seed) -> conversations`` function ``llmkit.training.finetune`` trains on."""
    check_order(order)
    return lambda n, split, seed: field_order_items(order, n, split, seed, count_range)


# ---------------------------------------------------------------------------------------------- scoring
def score_reply(content: list[dict], item: Conversation) -> dict:
    """Score one reply on its conclusion: does the call's ``total`` equal the true sum?

    Also recorded, not scored: whether the call validates against the schema, whether the running
    sums are all right and which fraction of their steps is (a model may copy the numbers but not
    yet add them), and whether the total agrees with the model's own last running sum (does it
    copy its evidence?)."""
    facts = item.expected.facts
    calls = [block for block in content if block["type"] == "tool_use"]
    arguments = calls[0]["input"] if calls else None
    valid = isinstance(arguments, dict) and ArgumentValidator(item.tools[0]["input_schema"]).is_valid(arguments)
    total = arguments.get("total") if valid else None
    running = arguments.get("running") if valid else None
    return {"numbers": facts["numbers"], "true_total": facts["total"], "called": bool(calls), "valid": valid,
            "total": total, "running": running, "correct": total == facts["total"],
            "running_right": running == facts["running"], "steps_right": steps_right(running, facts["running"]),
            "agrees_with_own_running": running is not None and total == last_sum(running)}


def steps_right(written: str | None, expected: str) -> float:
    """The fraction of the expected running steps (``+7=10``) written exactly, position by position."""
    if written is None:
        return 0.0
    wanted = expected.split()
    return sum(a == b for a, b in zip(written.split(), wanted)) / len(wanted)


def fraction(rows: list[dict], key: str) -> float:
    return round(sum(bool(r[key]) for r in rows) / len(rows), 3) if rows else 0.0


def evaluate(model, tokenizer, items: list[Conversation]) -> dict:
    """Answer every item greedily through the one harness (``Client``), the call constrained to the
    schema, and summarise the scores; ``rows`` holds every scored reply."""
    client = Client.from_model(model, tokenizer)
    model.eval()
    longest = max((len(item.expected.facts["numbers"]) for item in items), default=COUNT_RANGE[1])
    rows = []
    for item in items:
        reply = client.messages.create(messages=item.prompt, tools=item.tools,
                                       max_tokens=max_reply_tokens(max(longest, COUNT_RANGE[1])),
                                       temperature=0)
        rows.append({**score_reply(reply.content, item), "stop_reason": reply.stop_reason,
                     "output_tokens": reply.usage.output_tokens})
    return {"accuracy": fraction(rows, "correct"), "valid": fraction(rows, "valid"),
            "running_right": fraction(rows, "running_right"),
            "steps_right": round(sum(r["steps_right"] for r in rows) / max(len(rows), 1), 3),
            "agrees_with_own_running": fraction(rows, "agrees_with_own_running"),
            "mean_output_tokens": round(sum(r["output_tokens"] for r in rows) / max(len(rows), 1), 1), "rows": rows}


def most_common_total(items: list[Conversation]) -> float:
    """The score of always answering the most common total: what guessing alone would get."""
    totals = [item.expected.facts["total"] for item in items]
    return round(max(totals.count(t) for t in set(totals)) / len(totals), 3) if totals else 0.0


# ---------------------------------------------------------------------------------------------- the experiment
@dataclass(kw_only=True)
class FieldOrderSettings:
    """One run of the experiment: the base model, the fine-tuning budget and the held-out size."""

    base: str = "base"  # "base", "chat" or a model folder
    steps: int = 300
    batch_size: int = 16
    learning_rate: float = 1.5e-3
    heldout: int = 200  # held-out questions each variant answers
    count_range: tuple[int, int] = COUNT_RANGE  # how many numbers a question adds up, fewest and most
    seed: int = 1337
    runs_dir: str = "runs/field_order"  # where the two fine-tuned models are written (outside git)
    threads: int | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        check_int("heldout", self.heldout, minimum=1)  # the rest is checked by FinetuneConfig
        self.count_range = check_count_range(tuple(self.count_range))
        self.finetune_config(ORDERS[0])

    def finetune_config(self, order: str) -> FinetuneConfig:
        """The same config for both orders but for the folder it writes to."""
        return FinetuneConfig(base_model=self.base, out_dir=str(Path(self.runs_dir) / order),
                              batch_size=self.batch_size, max_steps=self.steps, learning_rate=self.learning_rate,
                              min_learning_rate=self.learning_rate / 15, warmup_steps=max(1, self.steps // 20),
                              eval_every=self.steps, checkpoint_every=self.steps, heldout_examples=32,
                              seed=self.seed, threads=self.threads, device=self.device)


def train_and_score(order: str, settings: FieldOrderSettings, *, progress: bool = False) -> dict:
    """Fine-tune one variant from the base and score it on the held-out questions."""
    from llmkit.model.weights import load_model
    from llmkit.training.finetune import finetune

    started = time.perf_counter()
    model = finetune("sft", settings.finetune_config(order), field_order_examples(order, settings.count_range),
                     progress=progress)
    trained = time.perf_counter()
    _, tokenizer = load_model(settings.base)
    scores = evaluate(model, tokenizer, field_order_items(order, settings.heldout, "heldout", seed=0,
                                                          count_range=settings.count_range))
    return {**scores, "train_minutes": round((trained - started) / 60, 2),
            "score_minutes": round((time.perf_counter() - trained) / 60, 2)}


DETAIL_FIGURES = ("accuracy", "valid", "running_right", "steps_right", "agrees_with_own_running",
                  "mean_output_tokens", "train_minutes", "score_minutes")


def combine_runs(runs: list[dict]) -> dict:
    """Runs of one setting that differ only in their seed, as one result: every figure the mean
    over the runs, and ``runs`` listing each seed's own.

    Two fine-tunes of 300 steps can land far apart (which questions came first, and when, decides
    how soon the model learns to copy the next number), so one seed per variant can show an effect
    that is the seed's, not the field order's. The replies shown are the first run's."""
    if not runs:
        raise ValueError("combine_runs needs at least one run")
    shared = [{k: v for k, v in run["settings"].items() if k != "seed"} for run in runs]
    if any(s != shared[0] for s in shared) or len({run["n"] for run in runs}) > 1:
        raise ValueError("these runs differ in more than their seed (settings or number of held-out "
                         f"questions): {shared}")
    seeds = [run["settings"]["seed"] for run in runs]
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"a seed appears twice: {seeds}")

    def mean(values) -> float:
        values = list(values)
        return round(sum(values) / len(values), 3)

    details = {order: {**{key: mean(run["details"][order][key] for run in runs) for key in DETAIL_FIGURES},
                       "replies": runs[0]["details"][order]["replies"], "replies_seed": seeds[0]}
               for order in ORDERS}
    return {"n": runs[0]["n"], **{order: mean(run[order] for run in runs) for order in ORDERS},
            "effect": mean(run[ORDERS[0]] - run[ORDERS[1]] for run in runs),
            "guess_most_common_total": runs[0]["guess_most_common_total"],
            "settings": {**shared[0], "seeds": seeds},
            "runs": [{"seed": seed, **{order: run[order] for order in ORDERS},
                      "effect": round(run[ORDERS[0]] - run[ORDERS[1]], 3), "wall_minutes": run["wall_minutes"]}
                     for seed, run in zip(seeds, runs)],
            "wall_minutes": round(sum(run["wall_minutes"] for run in runs), 2), "details": details}


def run_field_order(settings: FieldOrderSettings, *, progress: bool = False) -> dict:
    """Both variants, trained and scored alike; the figures ``results.json`` keeps.

    ``n`` held-out questions, and the fraction each variant got right (``evidence_first``,
    ``conclusion_first``); ``details`` has the other figures of each and a few of its replies."""
    started = time.perf_counter()
    details = {}
    for order in ORDERS:
        scores = train_and_score(order, settings, progress=progress)
        rows = scores.pop("rows")
        details[order] = {**scores, "replies": rows[:SHOWN_PER_ORDER]}
    heldout = field_order_items(ORDERS[0], settings.heldout, "heldout", seed=0, count_range=settings.count_range)
    return {"n": settings.heldout, **{order: details[order]["accuracy"] for order in ORDERS},
            "effect": round(details["evidence_first"]["accuracy"] - details["conclusion_first"]["accuracy"], 3),
            "guess_most_common_total": most_common_total(heldout),
            "settings": {"base": settings.base, "steps": settings.steps, "batch_size": settings.batch_size,
                         "learning_rate": settings.learning_rate, "seed": settings.seed,
                         "numbers_per_question": list(settings.count_range)},
            "wall_minutes": round((time.perf_counter() - started) / 60, 2), "details": details}
