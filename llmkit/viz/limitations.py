"""Notebook 11's pictures: what many runs of the same request did, and a human approval step.

``plot_outcomes`` draws replies sorted into outcomes, one stacked bar per condition (a clean tool
result against one carrying an injection, say), so a rate is seen next to its baseline.

``approval_prompt`` is the human in the loop for one pending tool call: it shows the call, a
Deny / Allow choice (Deny first: a harness that is not sure does not act), and the
``tool_result`` the harness sends back for the current choice, re-run through
``llmkit.chat.tools.run_tool_call`` whenever the choice changes. Its ``decide`` method is an
``llmkit.chat.tools.Approve`` hook that answers with the current choice, so the same widget can
approve a call made later by ``run_agent``. A notebook cell cannot wait for a click while it
runs, so code that must run unattended passes a scripted hook instead. The widget also carries a
plain HTML copy of itself, which a viewer without a live kernel shows.

``mask_walk`` and ``plot_allowed_tokens`` show constrained decoding from the inside: how many
tokens ``llmkit.chat.constrained.ToolCallConstraint`` leaves the model at each step of one tool call.
``read_tool_call_validity`` reads the committed measurement of invalid calls with the constraint
off and on (``python -m llmkit evals --tool-call-validity``), and ``plot_tool_call_validity``
draws it, one stacked bar per setting, split by why the call could not be run.

``read_fact_frequency``, ``fact_frequency_lines`` and ``plot_fact_frequency`` show the committed
fact-frequency experiment (``data/experiments/fact_frequency/``): how often a fact must be read in
pretraining before it is recalled, and how fluent the answer is when it is not.
"""
from __future__ import annotations

import copy
import functools
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from llmkit.chat.markers import marker_ids
from llmkit.chat.constrained import ToolCallConstraint
from llmkit.paths import data_path
from llmkit.chat.tools import Tool, run_tool_call

DECISIONS = ("deny", "allow")
OUTCOME_COLOURS = ("tab:green", "tab:red", "tab:grey", "tab:orange", "tab:purple", "tab:brown")


def outcome_order(groups: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Every outcome that occurs in ``groups``, in the order first seen (the bars' stacking order)."""
    return list(dict.fromkeys(outcome for counts in groups.values() for outcome in counts))


def plot_outcomes(groups: Mapping[str, Mapping[str, int]], *, title: str, outcomes: Sequence[str] | None = None,
                  xlabel: str = "replies"):
    """One horizontal bar per condition, split into its outcomes, each segment labelled with its count.

    ``groups``: condition -> {outcome: count}, e.g. ``{"clean result": {"follows the forecast": 19, ...}}``.
    ``outcomes``: the stacking order and colours (default: as first seen); outcomes not listed are
    drawn after them.
    """
    import matplotlib.pyplot as plt

    if not groups or not any(sum(counts.values()) for counts in groups.values()):
        raise ValueError("groups is empty: pass {condition: {outcome: count}} with at least one count")
    order = list(outcomes or []) + [o for o in outcome_order(groups) if o not in (outcomes or [])]
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(groups) + 1.6))
    conditions = list(groups)
    left = [0] * len(conditions)
    for index, outcome in enumerate(order):
        widths = [groups[c].get(outcome, 0) for c in conditions]
        colour = OUTCOME_COLOURS[index % len(OUTCOME_COLOURS)]
        bars = ax.barh(range(len(conditions)), widths, left=left, color=colour, label=outcome, edgecolor="white")
        ax.bar_label(bars, labels=[str(w) if w else "" for w in widths], label_type="center", color="white",
                     fontsize=9)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(conditions)), conditions)
    ax.invert_yaxis()  # the first condition on top
    ax.set_xlabel(xlabel)
    ax.xaxis.get_major_locator().set_params(integer=True)  # counts are whole numbers
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3 - 0.1 / len(groups)), ncol=min(3, len(order)))
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- approval
def call_html(name: str, arguments: Mapping) -> str:
    """A pending tool call as HTML: the tool's name and its arguments as JSON."""
    shown = json.dumps(dict(arguments), ensure_ascii=False, indent=1)
    return (f"<p>The model asks the harness to run <code>{html.escape(name)}</code> with:</p>"
            f"<pre style=\"margin:0 0 6px 0\">{html.escape(shown)}</pre>")


def result_html(block: Mapping, decision: str) -> str:
    """The ``tool_result`` block the model gets back for ``decision``, as HTML."""
    verdict = "an error result" if block["is_error"] else "the tool's output"
    return (f"<p>With <b>{html.escape(decision)}</b>, the harness sends back {verdict}:</p>"
            f"<pre style=\"margin:0\">{html.escape(str(block['content']))}</pre>")


class StaticHtmlFallback:
    """Mixin for a widget with a ``static_html()`` method: the display bundle carries that HTML too,
    so a viewer without a live kernel (a stored notebook, nbviewer, GitHub) still shows the widget."""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/html"] = self.static_html()
        return bundle


@functools.cache
def _prompt_class():
    """The widget class, made on first use so that importing this module never needs ipywidgets."""
    import ipywidgets as widgets

    class ApprovalPrompt(StaticHtmlFallback, widgets.VBox):
        """See ``approval_prompt``. ``decide`` is the Approve hook; ``block`` the latest result."""

        def decide(self, name: str, arguments: dict) -> str:
            return self.choice.value

        def static_html(self) -> str:
            return (f'<div class="llmkit-approval" style="border:1px solid #999;padding:6px;max-width:720px">'
                    f"{call_html(self.name, self.arguments)}<p>Decision: <b>{html.escape(self.choice.value)}</b> "
                    f"(the default; open the notebook in Jupyter to change it)</p>"
                    f"{result_html(self.block, self.choice.value)}</div>")

        def rerun(self, _change=None) -> None:
            self.block = run_tool_call(self.tools, self.name, copy.deepcopy(self.arguments),
                                       tool_use_id=self.tool_use_id, approve=self.decide)
            self.result.value = result_html(self.block, self.choice.value)

    return ApprovalPrompt


def approval_prompt(tools: Iterable[Tool], name: str, arguments: Mapping, *, default: str = "deny",
                    tool_use_id: str = "toolu_pending"):
    """A Deny / Allow prompt for one tool call the model asked for, with the result of the choice.

    tools: the tools the harness offers (a call to any other is refused whatever the choice).
    name, arguments: the pending call. default: "deny" (the safe choice) or "allow".
    """
    if default not in DECISIONS:
        raise ValueError(f"default must be one of {DECISIONS}, got {default!r}")
    if not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a dict of the call's arguments, got {type(arguments).__name__}")
    import ipywidgets as widgets

    choice = widgets.ToggleButtons(options=[("Deny", "deny"), ("Allow", "allow")], value=default,
                                   description="Run it?", button_style="")
    result = widgets.HTML()
    prompt = _prompt_class()([widgets.HTML(call_html(name, arguments)), choice, result])
    prompt.tools, prompt.name, prompt.arguments = list(tools), name, dict(arguments)
    prompt.tool_use_id, prompt.choice, prompt.result = tool_use_id, choice, result
    prompt.rerun()
    choice.observe(prompt.rerun, names="value")
    return prompt


# ---------------------------------------------------------------------------------------------- constrained output
@dataclass(frozen=True)
class MaskStep:
    """One step of a tool call under the constraint: the ``piece`` written next, how many tokens of
    the vocabulary were ``allowed`` at that step (the written one among them), and a few of them."""

    piece: str
    allowed: int
    examples: tuple[str, ...]


def mask_walk(tokenizer, tools, call: Mapping, *, examples: int = 6) -> list[MaskStep]:
    """Write ``call`` (``{"name": ..., "input": {...}}``) token by token under a fresh
    ``ToolCallConstraint`` for ``tools``, as the model would after ``<|tool_call|>``, recording the
    mask before each token; the last step is ``<|end_tool_call|>``.

    The call is encoded as the chat template writes it (``json.dumps``); one the constraint would
    not allow (a tool not offered, an argument off its schema) raises ``ValueError`` at that token.
    """
    if not isinstance(call, Mapping) or set(call) != {"name", "input"}:
        raise TypeError(f'call must be a dict {{"name": ..., "input": {{...}}}}, got {call!r}')
    constraint = ToolCallConstraint(tokenizer, tools)
    markers = marker_ids(tokenizer)
    constraint.advance(markers["tool_call"])  # the model has opened a call
    ids = tokenizer.encode(json.dumps(dict(call), ensure_ascii=False), disallowed_special=())
    steps = []
    for token in ids + [markers["end_tool_call"]]:
        mask = constraint.allowed()
        allowed = mask.nonzero().flatten().tolist()
        if token not in allowed:
            raise ValueError(f"{tokenizer.decode([token])!r} after {tokenizer.decode(ids[:len(steps)])!r} is not "
                             f"a valid continuation of a call to these tools; pass a call that fits their schemas")
        steps.append(MaskStep(tokenizer.decode([token]), len(allowed),
                              tuple(tokenizer.decode([t]) for t in allowed[:examples])))
        constraint.advance(token)
    return steps


def plot_allowed_tokens(steps: Sequence[MaskStep], *, vocab_size: int,
                        title: str = "Tokens the constraint allows at each step of a tool call"):
    """One bar per token of the call (labelled with it, a space shown as ␣): how many tokens were
    allowed there, on a log scale, with the whole vocabulary as a dashed line. A bar of height 1 is
    a forced step: the model's choice made no difference."""
    import matplotlib.pyplot as plt

    if not steps:
        raise ValueError("steps is empty: pass mask_walk(tokenizer, tools, call)")
    if any(not 1 <= step.allowed <= vocab_size for step in steps):
        raise ValueError(f"every step allows between 1 and vocab_size={vocab_size} tokens; got "
                         f"{[step.allowed for step in steps]}")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.22 * len(steps) + 1.5), 3.6))
    ax.bar(range(len(steps)), [step.allowed for step in steps], color="tab:blue")
    ax.axhline(vocab_size, color="grey", linestyle="--", linewidth=1)
    ax.text(len(steps) - 0.5, vocab_size, f"whole vocabulary ({vocab_size})", ha="right", va="bottom", fontsize=8,
            color="grey")
    ax.set_yscale("log")
    ax.set_ylim(0.8, vocab_size * 2.5)
    labels = [step.piece.replace(" ", "\u2423") for step in steps]  # a space shown as a visible mark
    ax.set_xticks(range(len(steps)), labels, rotation=90, fontsize=8, family="monospace")
    ax.set_xlim(-0.6, len(steps) - 0.4)
    ax.set_xlabel("the token written at this step")
    ax.set_ylabel("tokens allowed (log scale)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def read_tool_call_validity(path: str | Path | None = None) -> dict:
    """The committed measurement of invalid tool calls (default
    ``data/models/chat/tool_call_validity.json``): the ``command`` that made it and its ``rows``,
    one per temperature and constraint setting (``llmkit.course.call_failures.tool_call_validity_table``)."""
    path = Path(path) if path is not None else data_path("models", "chat", "tool_call_validity.json")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; make it with python -m llmkit evals --model chat "
                                f"--tool-call-validity > {path.name}")
    measured = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(measured, dict) or "rows" not in measured:
        raise ValueError(f"{path} holds no 'rows'; make it again with python -m llmkit evals --tool-call-validity")
    _check_validity_rows(measured["rows"])
    return measured


def _check_validity_rows(rows: Sequence[Mapping]) -> None:
    needed = {"constrained", "temperature", "invalid_rate", "by_reason"}
    if not rows or any(not needed <= set(row) for row in rows):
        raise ValueError(f"pass the rows of llmkit.course.call_failures.tool_call_validity_table, each with {sorted(needed)}")


def validity_table(rows: Sequence[Mapping]) -> list[dict]:
    """The measurement flattened for a printed table (``format_table``): temperature, constraint
    off/on, the invalid rate and each reason's rate, as percentages of the sampled turns written
    with one decimal."""
    _check_validity_rows(rows)
    return [{"temperature": f"{row['temperature']:g}", "constraint": "on" if row["constrained"] else "off",
             "invalid %": f"{100 * row['invalid_rate']:.1f}",
             **{f"{reason} %": f"{100 * rate:.1f}" for reason, rate in row["by_reason"].items()}}
            for row in rows]


def plot_tool_call_validity(rows: Sequence[Mapping], *,
                            title: str = "Tool calls that cannot be run: constraint off vs on"):
    """Per temperature, two bars (constraint off, on), each stacked by the reason its calls failed
    (``by_reason``, as a percentage of the sampled turns) and labelled with its total."""
    import matplotlib.pyplot as plt

    _check_validity_rows(rows)
    temperatures = sorted({row["temperature"] for row in rows})
    reasons = list(dict.fromkeys(reason for row in rows for reason in row["by_reason"]))
    width = 0.38
    # each temperature is a pair of bars: constraint off on the left, on on the right
    xs = [temperatures.index(row["temperature"]) + (width / 2 + 0.01) * (1 if row["constrained"] else -1)
          for row in rows]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for index, reason in enumerate(reasons):
        heights = [100 * row["by_reason"].get(reason, 0.0) for row in rows]
        bottoms = [100 * sum(row["by_reason"].get(r, 0.0) for r in reasons[:index]) for row in rows]
        colour = OUTCOME_COLOURS[(index + 1) % len(OUTCOME_COLOURS)]  # red first: a broken call is bad
        ax.bar(xs, heights, width, bottom=bottoms, label=reason, color=colour)
    for x, row in zip(xs, rows):
        ax.annotate(f"{'on' if row['constrained'] else 'off'}\n{100 * row['invalid_rate']:.0f}%",
                    (x, 100 * row["invalid_rate"]), xytext=(0, 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(range(len(temperatures)), [f"temperature {t:g}" for t in temperatures])
    highest = max(100 * row["invalid_rate"] for row in rows)
    ax.set_ylim(0, max(highest * 1.35, 5))
    ax.set_ylabel("calls that cannot be run (% of turns)")
    ax.set_title(title)
    ax.legend(title="why", fontsize=8, title_fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ fact frequency
FACT_FREQUENCY_COMMAND = "python data/experiments/fact_frequency/build.py"


def read_fact_frequency(path: str | Path | None = None) -> dict:
    """The committed fact-frequency results (default ``data/experiments/fact_frequency/results.json``):
    ``bins`` (one per number of mentions: ``recall``, ``fluent_when_wrong``, ...), ``example`` and ``settings``."""
    path = Path(path) if path is not None else data_path("experiments", "fact_frequency", "results.json")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; make it with {FACT_FREQUENCY_COMMAND} (about 10 minutes)")
    results = json.loads(path.read_text(encoding="utf-8"))
    bins = results.get("bins") if isinstance(results, dict) else None
    if not bins or any(not {"mentions", "n", "recall", "fluent_when_wrong"} <= set(row) for row in bins):
        raise ValueError(f"{path} holds no per-bin results; make it again with {FACT_FREQUENCY_COMMAND}")
    return results


def fact_frequency_lines(results: Mapping) -> list[str]:
    """One sentence per number of mentions, built from the results: recall, and how the misses read."""
    lines = []
    for row in results["bins"]:
        times = "time " if row["mentions"] == 1 else "times"
        line = f"stated {row['mentions']:>3} {times} in the text: {row['n']:>2} facts, recalled {row['recall']:.0%}"
        if row["fluent_when_wrong"] is not None:
            wrong = round(row["n"] * (1 - row["recall"]))
            line += f"; of the {wrong} wrong answers, {row['fluent_when_wrong']:.0%} were a fluent, plausible value"
        lines.append(line)
    return lines


def plot_fact_frequency(results: Mapping, *, title: str = "Recall of a fact against how often pretraining read it"):
    """Recall per bin (with the majority-guess baseline) and, where answers were wrong, the share
    that were fluent: a plausible value ending a well-formed sentence."""
    import matplotlib.pyplot as plt

    bins = results["bins"]
    mentions = [row["mentions"] for row in bins]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    ax.plot(mentions, [row["recall"] for row in bins], "o-", label="recalled (exact value)")
    wrong = [(row["mentions"], row["fluent_when_wrong"]) for row in bins if row["fluent_when_wrong"] is not None]
    ax.plot(*zip(*wrong), "s--", color="tab:red", label="wrong answers that read as fluent")
    ax.plot(mentions, [row.get("majority_guess_recall", 0.0) for row in bins], ":", color="grey",
            label="always the most common value")
    ax.set_xscale("log", base=2)
    ax.set_xticks(mentions, [str(m) for m in mentions])
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("times the fact was stated in the pretraining text")
    ax.set_ylabel("share of facts / of wrong answers")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    return fig
