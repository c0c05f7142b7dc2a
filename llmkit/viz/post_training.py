"""Notebook 07's pictures and tables: base vs chat replies, the fine-tuning logs, DPO rewards per
pair, the held-out evals, and the strawberry experiment.

Everything here reads what ``llmkit`` computed or what the training scripts committed to
``data/`` (the recipe's stage logs ``data/models/*/stages/<stage>/``, ``data/models/chat/evals.json``,
``data/strawberry/results*.json``, ``data/experiments/strawberry/results.json``),
so a notebook re-executed after the chat model is retrained shows the new numbers without edits.
Functions that return data (``one_turn``, ``stage_logs``, ``pair_rewards``, ``evals_rows``, ``probe_rows``,
``strawberry_rows``, ``strawberry_experiment_rows``) are testable without a display; the plots and widgets only draw them.
"""
from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import torch

from llmkit.chat.client import Client
from llmkit.chat.trace import Trace
from llmkit.course.preferences import Preference
from llmkit.course.strawberry import STRAWBERRY_FORMATS
from llmkit.training.dpo import answer_logprobs, preference_batch
from llmkit.model.transformer import Transformer
from llmkit.paths import data_path
from llmkit.training.checkpoint import read_log



# ---------------------------------------------------------------------------------------------- replies
@dataclass(frozen=True)
class Reply:
    """One assistant turn: who wrote it, the text with control tokens shown by name, why it
    stopped, and how many tokens it took."""

    name: str
    text: str
    stop_reason: str
    output_tokens: int


def one_turn(model: Transformer, tokenizer, messages: list[dict], *, tools=None, system: str | None = None,
             max_new_tokens: int = 48, name: str = "") -> Reply:
    """Let ``model`` write one assistant turn for ``messages`` greedily, through a ``Client`` (no
    prompt cache, no constrained decoding: what the model writes on its own), stopping where a
    harness would: ``<|end_turn|>`` or the end of a tool call. The text is the raw tokens it wrote,
    markers shown by name.

    This is the first step of every chat request; a model that never learned the markers just
    keeps going until ``max_new_tokens``.
    """
    trace = Trace()
    reply = Client.from_model(model, tokenizer).messages.create(
        messages=messages, tools=tools, system=system, max_tokens=max_new_tokens, temperature=0, cache=False,
        constrain_tools=False, trace=trace)
    tokens = [token for event in trace.of_kind("answer") for token in event.data["tokens"]]
    return Reply(name, tokenizer.decode(tokens), reply.stop_reason, reply.usage.output_tokens)


def replies_html(replies: Sequence[Reply]) -> str:
    """Replies side by side, one column each, with their stop reasons."""
    columns = "".join(
        f'<div style="flex:1;min-width:0;border:1px solid #ccc;border-radius:4px;padding:4px 8px">'
        f"<b>{html.escape(r.name)}</b> <small>({r.output_tokens} tokens, stop reason <code>{r.stop_reason}</code>)"
        f'</small><pre style="white-space:pre-wrap;word-break:break-word;margin:4px 0">{html.escape(r.text)}</pre></div>'
        for r in replies)
    return f'<div style="display:flex;gap:8px">{columns}</div>'


def model_comparer(models: Mapping[str, Transformer], tokenizer, prompts: Mapping[str, dict], *,
                   prompt: str | None = None, max_new_tokens: int = 48):
    """Pick a prompt and see each model's reply to it side by side (greedy, so replies repeat).

    ``prompts`` maps a label to ``{"messages": [...], "tools": [...], "system": ...}`` (tools and
    system optional). Each reply is computed once, when its prompt is first shown.
    """
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    if not prompts:
        raise ValueError("prompts is empty; give at least one {'messages': [...]} to compare on")
    prompt = next(iter(prompts)) if prompt is None else prompt
    if prompt not in prompts:
        raise ValueError(f"prompt must be one of {list(prompts)}, got {prompt!r}")
    seen: dict[str, str] = {}

    def replies(label: str) -> str:
        if label not in seen:
            request = prompts[label]
            seen[label] = replies_html([
                one_turn(model, tokenizer, request["messages"], tools=request.get("tools"),
                         system=request.get("system"), max_new_tokens=max_new_tokens, name=name)
                for name, model in models.items()])
        return seen[label]

    chooser = widgets.Dropdown(options=list(prompts), value=prompt, description="prompt",
                               layout=widgets.Layout(width="auto"))
    shown = widgets.HTML()

    def redraw(_change=None) -> None:
        shown.value = replies(chooser.value)

    chooser.observe(redraw, names="value")
    redraw()
    return widgets.VBox([chooser, shown])


# ---------------------------------------------------------------------------------------------- logs
CHAT_STAGES = ("sft_skills", "sft_polish")  # the recipe's SFT stages, in order, that made the chat model


def stage_logs(stages: Sequence[str] = CHAT_STAGES, models: str | Path | None = None) -> list[tuple[str, list[dict]]]:
    """The training logs of the recipe ``stages``, in order: ``<model>/stages/<stage>/train_log.jsonl``.

    Each stage started from the weights the one before it ended with, so together they are one
    training history. The shipped models keep their stages' logs (``data/models/skills`` holds
    ``sft_skills``, ``data/models/chat`` the stages after it); ``models`` is the folder they are in.
    """
    models = Path(models) if models is not None else data_path("models")
    found = []
    for stage in stages:
        paths = sorted(models.glob(f"*/stages/{stage}/train_log.jsonl"))
        if not paths:
            raise FileNotFoundError(f"no model in {models} keeps the log of stage {stage!r} "
                                    f"(stages/{stage}/train_log.jsonl); run `make models` to make it")
        found.append((stage, read_log(paths[0])))
    return found


def plot_stage_logs(stages: Sequence[tuple[str, list[dict]]], title: str = "Supervised fine-tuning: loss"):
    """Training and held-out loss of each stage, end to end (the steps count on across stages); the
    legend sits to the right of the plot, so it covers no curve."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.8))
    offset = 0
    for index, (name, log) in enumerate(stages):
        colour = f"C{index}"
        train = [r for r in log if r["kind"] == "train"]
        held = [r for r in log if r["kind"] == "eval"]
        ax.plot([offset + r["step"] for r in train], [r["loss"] for r in train], color=colour, lw=1,
                label=f"{name}: training batches")
        ax.plot([offset + r["step"] for r in held], [r["heldout_loss"] for r in held], "o--", color=colour,
                label=f"{name}: held-out conversations")
        if index:
            ax.axvline(offset, color="grey", lw=0.8, ls=":")
        offset += max((r["step"] for r in log), default=0)
    ax.set(title=title, xlabel="optimizer step" + (" (all stages, one after the other)" if len(stages) > 1 else ""),
           ylabel="loss per assistant token (nats)")
    losses = [r[k] for _, log in stages for r in log for k in ("loss", "heldout_loss") if k in r]
    if losses and max(losses) > 20 * min(losses):  # a long run falls by orders of magnitude
        ax.set_yscale("log")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot: it never hides a curve
    fig.tight_layout()
    return fig


def plot_dpo_log(log: list[dict], title: str = "DPO: loss and implicit reward accuracy"):
    """Left: DPO loss (starts at ln 2, policy = reference). Right: how often the chosen answer gets
    the higher implicit reward, on training pairs and on held-out pairs."""
    import matplotlib.pyplot as plt

    train = [r for r in log if r["kind"] == "train"]
    held = [r for r in log if r["kind"] == "eval"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    left.plot([r["step"] for r in train], [r["loss"] for r in train], label="training pairs")
    left.plot([r["step"] for r in held], [r["heldout_loss"] for r in held], "o--", label="held-out pairs")
    left.axhline(math.log(2), color="grey", lw=0.8, ls=":", label="ln 2 (no preference yet)")
    left.set(title=title.split(":")[0] + ": loss", xlabel="optimizer step", ylabel="DPO loss")
    left.legend(fontsize=8)
    right.plot([r["step"] for r in held], [r["heldout_reward_accuracy"] for r in held], "o--", label="held-out pairs")
    trained = [r for r in held if r.get("train_reward_accuracy") is not None]
    right.plot([r["step"] for r in trained], [r["train_reward_accuracy"] for r in trained], "s-",
               label="training pairs (recent steps)")
    right.set(title="chosen answer preferred", xlabel="optimizer step", ylabel="implicit reward accuracy",
              ylim=(-0.05, 1.05))
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- DPO
@torch.no_grad()
def pair_rewards(policy: Transformer, reference: Transformer, tokenizer, pairs: Sequence[Preference], *,
                 beta: float = 0.1) -> list[dict]:
    """For each preference pair: log p(chosen) and log p(rejected) under both models, and the DPO
    reward margin ``beta * ((policy - reference)[chosen] - (policy - reference)[rejected])``.

    A margin above 0 means the policy moved toward the chosen answer, relative to the reference;
    with policy = reference every margin is exactly 0.
    """
    if not pairs:
        raise ValueError("pairs is empty; pass some llmkit.course.preferences.make_preferences(...) pairs")
    batch = preference_batch(pairs, tokenizer, policy.config.context_length).to(policy.device)
    scores = {}
    for name, model in (("policy", policy), ("reference", reference)):
        was_training = model.training
        model.eval()
        scores[name] = answer_logprobs(model(batch.inputs), batch.targets, batch.mask).tolist()
        model.train(was_training)
    n = len(pairs)
    rows = []
    for i, pair in enumerate(pairs):
        ids = pair.render(tokenizer)
        policy_chosen, policy_rejected = scores["policy"][i], scores["policy"][n + i]
        reference_chosen, reference_rejected = scores["reference"][i], scores["reference"][n + i]
        margin = beta * ((policy_chosen - reference_chosen) - (policy_rejected - reference_rejected))
        rows.append({"kind": pair.kind, "question": _last_question(pair.prompt),
                     "chosen": tokenizer.decode(ids["chosen"]), "rejected": tokenizer.decode(ids["rejected"]),
                     "policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
                     "reference_chosen": reference_chosen, "reference_rejected": reference_rejected,
                     "margin": margin})
    return rows


def _last_question(messages: list[dict]) -> str:
    content = messages[-1]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


# ---------------------------------------------------------------------------------------------- evals
SKILL_METRICS = ("tool_call_valid", "right_tool", "args_exact", "answer_from_result", "ends_turn", "no_invention",
                 "memory")
EVAL_SPLITS = ("seen", "unseen_values", "unseen_phrasings_and_tools")


def evals_rows(evals: Mapping | None = None, metrics: Sequence[str] = SKILL_METRICS) -> list[dict]:
    """One row per split of ``evals.json`` (default: the shipped chat model's), in the order seen,
    unseen values, unseen phrasings and tools: ``split`` and each of ``metrics``. Read across the
    rows: what the model does on requests worded like its training ones, and on ones it never saw."""
    if evals is None:
        evals = json.loads(data_path("models", "chat", "evals.json").read_text(encoding="utf-8"))
    missing = [split for split in EVAL_SPLITS if split not in evals]
    if missing:
        raise ValueError(f"the evals have no {', '.join(missing)} split; they come from the recipe's evals stage "
                         f"(python -m llmkit evals --model chat --json)")
    return [{"split": split, **{m: evals[split].get(m) for m in metrics}} for split in EVAL_SPLITS]


def probe_rows(stages: Sequence[str] = ("sft_polish", "dpo"), split: str = "unseen_phrasings_and_tools",
               metrics: Sequence[str] = SKILL_METRICS, models: str | Path | None = None) -> list[dict]:
    """The skill probe each recipe stage ran at its end (``done.json``; a few greedy conversations
    per kind), one row per stage: how a stage moved the behaviour, not only its loss."""
    models = Path(models) if models is not None else data_path("models")
    rows = []
    for stage in stages:
        paths = sorted(models.glob(f"*/stages/{stage}/done.json"))
        if not paths:
            raise FileNotFoundError(f"no model in {models} keeps stage {stage!r}; run `make models` to make it")
        probe = json.loads(paths[0].read_text(encoding="utf-8"))["figures"]["probe"][split]
        rows.append({"stage": stage, **{m: probe.get(m) for m in metrics}})
    return rows


def format_table(rows: Sequence[Mapping], columns: Sequence[str], *, width: int = 28) -> str:
    """Rows as a plain-text table; floats with 3 decimals, long text cut to ``width`` with '…'
    (for display only: the rows themselves keep every character)."""
    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.3f}"
        text = "" if value is None else str(value).replace("\n", " ")
        return text if len(text) <= width else text[: width - 1] + "…"

    table = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) if table else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) if _is_number(v) else v.ljust(w) for v, w in zip(r, widths)) for r in table]
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", text) is not None


# ---------------------------------------------------------------------------------------------- strawberry
def strawberry_rows(folder: str | Path | None = None) -> list[dict]:
    """Every (format, steps) run of the strawberry experiment, from ``results*.json``, in format
    order (direct, spelled, tool, spell) then steps. Each row keeps its ``items``."""
    folder = Path(folder) if folder is not None else data_path("strawberry")
    rows = []
    for path in sorted(folder.glob("results*.json")):
        rows += json.loads(path.read_text(encoding="utf-8"))["formats"].values()
    if not rows:
        raise FileNotFoundError(f"no results*.json in {folder}; run `python data/build_strawberry.py` first")
    order = {fmt: i for i, fmt in enumerate(STRAWBERRY_FORMATS)}
    return sorted(rows, key=lambda r: (order.get(r["format"], len(order)), r["steps"]))


def strawberry_experiment_rows(path: str | Path | None = None) -> list[dict]:
    """The second strawberry experiment, from a model taught to spell first
    (``data/experiments/strawberry/results.json``), as rows shaped like ``strawberry_rows``': one per
    format it has scored so far, ``spell`` being the speller asked to spell the held-out words (its
    steps count the polish steps too)."""
    path = Path(path) if path is not None else data_path("experiments", "strawberry", "results.json")
    results = json.loads(path.read_text(encoding="utf-8"))
    settings, rows = results["settings"], []
    for fmt in STRAWBERRY_FORMATS:
        key = "spelling_alone" if fmt == "spell" else fmt
        if results["heldout"].get(key) is None:
            continue  # that stage has not run yet
        steps = settings["steps"] + settings.get("polish_steps", 0) if fmt == "spell" else settings["format_steps"]
        rows.append({"format": fmt, "steps": steps,
                     "accuracy": results["heldout"][key],
                     "accuracy_real_words": results["heldout_real_words"][key],
                     "accuracy_invented_words": results["heldout_invented_words"][key],
                     "mean_output_tokens": results["mean_output_tokens"][key], "items": results["items"][fmt]})
    if not rows:
        raise ValueError(f"{path} holds no scored format yet; run python data/experiments/strawberry/build.py")
    return rows


def most_common_count_accuracy(items: Sequence[Mapping]) -> float:
    """The score of a model that ignores the word and always answers the most common count:
    the baseline any letter counter has to beat."""
    counts = [item["count"] for item in items]
    return max(counts.count(c) for c in set(counts)) / len(counts)


def plot_strawberry(rows: Sequence[Mapping], baseline: float | None = None,
                    title: str = "The strawberry experiment (held-out words)"):
    """Left: accuracy of each format, one bar per training length, with the always-guess-the-
    most-common-count baseline. Right: the price, output tokens per answer."""
    import matplotlib.pyplot as plt

    formats = list(dict.fromkeys(r["format"] for r in rows))
    steps = sorted({r["steps"] for r in rows})
    by_key = {(r["format"], r["steps"]): r for r in rows}
    width = 0.8 / len(steps)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for j, n_steps in enumerate(steps):
        xs = [i + (j - (len(steps) - 1) / 2) * width for i in range(len(formats))]
        found = [by_key.get((f, n_steps)) for f in formats]
        for ax, key, fmt in ((left, "accuracy", "%.2f"), (right, "mean_output_tokens", "%.0f")):
            bars = ax.bar([x for x, r in zip(xs, found) if r], [r[key] for r in found if r], width,
                          label=f"{n_steps} fine-tuning steps", color=f"C{j}")
            ax.bar_label(bars, fmt=fmt, fontsize=7)  # so a score of 0 still shows
    if baseline is not None:
        left.axhline(baseline, color="black", lw=1, ls="--", label="always say the most common count")
    left.set(title=title, xlabel="format", ylabel="accuracy", ylim=(0, 1.05))
    right.set(title="The price: output tokens per answer", xlabel="format", ylabel="mean output tokens")
    for ax in (left, right):
        ax.set_xticks(range(len(formats)), formats)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
