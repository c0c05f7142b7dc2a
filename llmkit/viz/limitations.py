"""Notebook 11's pictures: what many runs of the same request did, and a human approval step.

``plot_outcomes`` draws replies sorted into outcomes, one stacked bar per condition (a clean tool
result against one carrying an injection, say), so a rate is seen next to its baseline.

``approval_prompt`` is the human in the loop for one pending tool call: it shows the call, a
Deny / Allow choice (Deny first: a harness that is not sure does not act), and the
``tool_result`` the harness sends back for the current choice, re-run through
``llmkit.tools.run_tool_call`` whenever the choice changes. Its ``decide`` method is an
``llmkit.tools.Approve`` hook that answers with the current choice, so the same widget can
approve a call made later by ``run_agent``. A notebook cell cannot wait for a click while it
runs, so code that must run unattended passes a scripted hook instead. The widget also carries a
plain HTML copy of itself, which a viewer without a live kernel shows.
"""
from __future__ import annotations

import copy
import functools
import html
import json
from typing import Iterable, Mapping, Sequence

from llmkit.tools import Tool, run_tool_call

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


@functools.cache
def _prompt_class():
    """The widget class, made on first use so that importing this module never needs ipywidgets."""
    import ipywidgets as widgets

    class ApprovalPrompt(widgets.VBox):
        """See ``approval_prompt``. ``decide`` is the Approve hook; ``block`` the latest result."""

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            bundle["text/html"] = self.static_html()  # what a viewer without a live kernel shows
            return bundle

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
