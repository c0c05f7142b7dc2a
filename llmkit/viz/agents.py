"""Notebook 09's pictures: a tool call in tokens, the agent loop with a human approving each call, and
how often each way of calling a tool leaves the harness nothing it can run.

- ``tokens_from`` cuts a rendered conversation at a position, so ``llmkit.viz.chat.show_conversation``
  draws only what one step added: what the model wrote (solid) apart from what it was given (faded).
- ``tool_steps`` lists the tool calls of an ``llmkit.chat.agent.AgentResult`` beside their results, as
  plain data, whoever ran them (the loop, or the client for a server tool).
- ``approval_agent`` is ``run_agent`` with a human in the loop: an Approve / Deny button pair is the
  ``approve`` hook. A notebook cell cannot wait for a click while it runs (the kernel handles the
  click only once the cell is done), so the widget's Run button starts the loop in a background
  thread and the hook *waits* there, as a real harness waits for its user. Code that must run
  unattended (an executed notebook, a test) passes a scripted approve function instead. The widget
  also carries a plain HTML copy of itself, which a viewer without a live kernel shows.
- ``invalid_call_rows``, ``format_invalid_calls`` and ``plot_invalid_calls`` put the measurements of
  the ReAct text protocol (``python -m llmkit react``) beside those of structured calls with and
  without constrained decoding (``python -m llmkit evals --tool-call-validity``).
- ``read_field_order``, ``field_order_lines`` and ``plot_field_order`` show the field-order
  experiment (``data/experiments/field_order/``): the same sums reported with the evidence before
  the conclusion or after it.
"""
from __future__ import annotations

import copy
import functools
import html
import threading
from typing import Any, Iterable, Mapping, Sequence

from llmkit.checks import check_int
from llmkit.chat.agent import run_agent
from llmkit.chat.template import Rendered
from llmkit.chat.tools import Tool, tools_by_name
from llmkit.viz.chat import message_line
from llmkit.viz.limitations import StaticHtmlFallback, call_html

PROTOCOLS = ("ReAct text", "structured", "structured + constrained")
PROTOCOL_COLOURS = {"ReAct text": "tab:red", "structured": "tab:orange", "structured + constrained": "tab:green"}


# ---------------------------------------------------------------------------------------------- tokens
def tokens_from(rendered: Rendered, start: int) -> Rendered:
    """The tokens of ``rendered`` from position ``start`` on (with their mask and roles), to draw with
    ``llmkit.viz.chat.show_conversation``: start at the length of an earlier prompt to see only what
    one step added. Solid chips are what the model wrote (the loss mask), faded ones what it was
    given: a tool call is the model's, the result the harness's."""
    check_int("start", start, minimum=0, maximum=len(rendered))  # a token position
    return Rendered(rendered.ids[start:], rendered.mask[start:], rendered.roles[start:])


# ---------------------------------------------------------------------------------------------- the loop
def tool_steps(transcript: Sequence[Mapping]) -> list[dict]:
    """Every tool call in a transcript with its result: ``name``, ``input``, ``result`` (the text
    sent back, None if none came), ``is_error`` and ``ran_by``, named as the API documentation names
    it: "your code" for a client tool (the agent loop ran it), "the provider" for a server tool (run
    inside the request; llmkit's ``Client`` plays the provider's part)."""
    steps: list[dict] = []
    waiting: dict[str, dict] = {}  # tool_use id -> its step, until its result comes
    for message in transcript:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if block["type"] in ("tool_use", "server_tool_use"):
                step = {"name": block.get("name", ""), "input": copy.deepcopy(block.get("input")), "result": None,
                        "is_error": None, "ran_by": "the provider" if block["type"] == "server_tool_use" else "your code"}
                steps.append(step)
                waiting[block["id"]] = step
            elif block["type"] in ("tool_result", "server_tool_result") and block["tool_use_id"] in waiting:
                step = waiting.pop(block["tool_use_id"])
                step["result"], step["is_error"] = block["content"], bool(block.get("is_error", False))
    return steps


def transcript_text(transcript: Sequence[Mapping], limit: int = 160) -> str:
    """The transcript, one message per line (``llmkit.viz.chat.message_line``)."""
    return "\n".join(message_line(dict(message), limit=limit) for message in transcript)


@functools.cache
def _agent_class():
    """The widget class, made on first use so that importing this module never needs ipywidgets."""
    import ipywidgets as widgets

    class ApprovalAgent(StaticHtmlFallback, widgets.VBox):
        """See ``approval_agent``. ``approve`` is the hook; ``decisions`` lists ``(name, arguments,
        decision)`` for every call asked about; ``result`` is the last run's ``AgentResult`` and
        ``error`` what stopped a run that failed."""

        # --- the hook, called by run_agent in the worker thread --------------------------------
        def approve(self, name: str, arguments: dict) -> str:
            """Show the call, enable the buttons and wait for a click: "allow" or "deny"."""
            if threading.current_thread() is threading.main_thread():
                raise RuntimeError("approve waits for a click, and a click cannot arrive while a cell is running: "
                                   "press the widget's Run button (it runs the loop in a background thread), or "
                                   "pass run_agent a scripted approve function")
            self._clicked.clear()
            self.pending.value = call_html(name, arguments)
            self._show_status(f"waiting for you: approve or deny <code>{html.escape(name)}</code>")
            self._set_buttons(waiting=True)
            self._clicked.wait()
            self._set_buttons(waiting=False)
            decision = self._decision
            self.decisions.append((name, copy.deepcopy(arguments), decision))
            self.pending.value, self.report.value = "", self._report_html()
            self._show_status(f"{decision}: <code>{html.escape(name)}</code>; the model is writing again")
            return decision

        @property
        def waiting(self) -> bool:
            """True while a call waits for Approve or Deny."""
            return not self.approve_button.disabled

        def click(self, decision: str) -> None:
            """What the buttons do: answer the waiting call with ``decision``."""
            if decision not in ("allow", "deny"):
                raise ValueError(f"decision must be 'allow' or 'deny', got {decision!r}")
            self._decision = decision
            self._clicked.set()

        # --- running ---------------------------------------------------------------------------
        def run(self, _button=None) -> None:
            """Start the agent in a background thread (the Run button); one run at a time."""
            if self._worker is not None and self._worker.is_alive():
                return
            self.decisions, self.result, self.error = [], None, None
            self.run_button.disabled = True
            self.report.value = ""
            self._show_status("running: the model is writing")
            self._worker = threading.Thread(target=self._work, name="approval-agent", daemon=True)
            self._worker.start()

        def wait(self, timeout: float | None = None) -> bool:
            """Wait for the run to end; True if it has (for scripts and tests)."""
            if self._worker is not None:
                self._worker.join(timeout)
            return self._worker is None or not self._worker.is_alive()

        def _work(self) -> None:
            try:
                self.result = run_agent(self.client, self.messages, self.tools, approve=self.approve,
                                        max_iterations=self.max_iterations, **self.create_kwargs)
                stop = "ran out of iterations" if self.result.stopped_by_limit else self.result.final.stop_reason
                self._show_status(f"done: {self.result.iterations} model calls, stop reason {html.escape(stop)}")
            except Exception as exc:  # shown in the widget: a background thread has nowhere else to report
                self.error = exc
                self._show_status(f"the run failed: {html.escape(type(exc).__name__)}: {html.escape(str(exc))}")
            finally:
                self._set_buttons(waiting=False)
                self.pending.value = ""
                self.report.value = self._report_html()
                self.run_button.disabled = False

        # --- drawing ---------------------------------------------------------------------------
        def _set_buttons(self, waiting: bool) -> None:
            self.approve_button.disabled = self.deny_button.disabled = not waiting

        def _show_status(self, text: str) -> None:
            self.status.value = f"<p><b>{text}</b></p>"

        def _report_html(self) -> str:
            parts = []
            if self.decisions:
                items = "".join(f"<li><code>{html.escape(name)}({html.escape(_arguments_text(arguments))})</code>: "
                                f"<b>{decision}</b></li>" for name, arguments, decision in self.decisions)
                parts.append(f"<p>Your decisions:</p><ul>{items}</ul>")
            if self.result is not None:
                parts.append(f"<p>The conversation the loop built:</p>"
                             f"<pre>{html.escape(transcript_text(self.result.transcript))}</pre>")
            return "".join(parts)

        def static_html(self) -> str:
            names = ", ".join(f"<code>{html.escape(t.name)}</code>" for t in self.tools)
            question = html.escape(message_line(self.messages[-1], limit=200).strip())
            return (f'<div class="llmkit-approval-agent" style="border:1px solid #999;padding:6px;max-width:760px">'
                    f"<p>An agent with tools {names}, asked:</p><pre>{question}</pre>{self.status.value}"
                    f"{self._report_html()}<p><i>Open the notebook in Jupyter and press <b>Run the agent</b>: each "
                    f"call the model asks for waits for your <b>Approve</b> or <b>Deny</b>.</i></p></div>")

    return ApprovalAgent


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return repr(arguments)


def approval_agent(client, messages: list[dict], tools: Iterable[Tool], *, max_iterations: int = 4,
                   **create_kwargs: Any):
    """``run_agent(client, messages, tools, ...)`` behind a Run button, asking you before each tool runs.

    Every client tool call the model asks for waits, with its arguments shown, until you press
    Approve (the tool runs) or Deny (the model gets an error result saying you refused). Server
    tools run inside the request, as a provider runs them, and are not asked about.
    create_kwargs: passed to every ``client.messages.create`` (max_tokens, temperature, ...).
    """
    import ipywidgets as widgets

    tools = list(tools)
    tools_by_name(tools)  # refuses non-Tool items now, not inside the background thread
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts, such as "
                         "[{'role': 'user', 'content': 'Will it rain in Pune tomorrow?'}]")
    if "max_tokens" not in create_kwargs:
        raise TypeError("pass max_tokens (and any other create arguments, such as temperature=0)")
    run_button = widgets.Button(description="Run the agent", button_style="primary", icon="play")
    approve_button = widgets.Button(description="Approve", button_style="success", disabled=True)
    deny_button = widgets.Button(description="Deny", button_style="danger", disabled=True)
    status, pending, report = widgets.HTML(), widgets.HTML(), widgets.HTML()
    agent = _agent_class()([run_button, status, pending, widgets.HBox([approve_button, deny_button]), report])
    agent.client, agent.messages, agent.tools = client, copy.deepcopy(messages), tools
    agent.max_iterations, agent.create_kwargs = max_iterations, dict(create_kwargs)
    agent.run_button, agent.approve_button, agent.deny_button = run_button, approve_button, deny_button
    agent.status, agent.pending, agent.report = status, pending, report
    agent.decisions, agent.result, agent.error = [], None, None
    agent._worker, agent._clicked, agent._decision = None, threading.Event(), "deny"
    agent._show_status("not run yet")
    run_button.on_click(agent.run)
    approve_button.on_click(lambda _button: agent.click("allow"))
    deny_button.on_click(lambda _button: agent.click("deny"))
    return agent


# ---------------------------------------------------------------------------------------------- failure rates
def invalid_call_rows(react: Mapping, validity: Mapping) -> list[dict]:
    """One row per protocol and temperature: the fraction of replies with a call that cannot be run
    (``unrunnable``) and with no call at all (``no_call``), out of ``n``.

    react: ``python -m llmkit react --json`` output (``{"runs": [...]}``): ``no_action`` is "no call",
        every other parse failure "cannot be run".
    validity: ``python -m llmkit evals --tool-call-validity`` output (``{"rows": [...]}``): ``invalid_rate``
        is "cannot be run", and the turns without a call (``n - calls``) are "no call".
    Every question in both sets needs a tool, so either way the harness had nothing to run.
    """
    rows = []
    for run in _listed(react, "runs"):
        no_call = run["by_reason"]["no_action"]
        rows.append({"protocol": PROTOCOLS[0], "temperature": run["temperature"], "n": run["n"],
                     "unrunnable": round(run["parse_failure_rate"] - no_call, 4), "no_call": no_call})
    for row in _listed(validity, "rows"):
        rows.append({"protocol": PROTOCOLS[2] if row["constrained"] else PROTOCOLS[1],
                     "temperature": row["temperature"], "n": row["n"], "unrunnable": row["invalid_rate"],
                     "no_call": round((row["n"] - row["calls"]) / row["n"], 4)})
    return sorted(rows, key=lambda r: (r["temperature"], PROTOCOLS.index(r["protocol"])))


def _listed(results: Mapping, key: str) -> list[dict]:
    if not isinstance(results, Mapping) or not isinstance(results.get(key), list):
        raise ValueError(f"expected a dict with a {key!r} list, as the measuring command prints it; "
                         f"got {results!r:.80}")
    return results[key]


def format_invalid_calls(rows: Sequence[Mapping]) -> str:
    """``invalid_call_rows`` as a text table, percentages to one decimal."""
    lines = [f"{'temperature':>11}  {'protocol':<24} {'n':>3}  {'cannot run':>10}  {'no call':>7}  "
             f"{'nothing to run':>14}"]
    for row in rows:
        total = row["unrunnable"] + row["no_call"]
        lines.append(f"{row['temperature']:>11}  {row['protocol']:<24} {row['n']:>3}  {row['unrunnable']:>10.1%}  "
                     f"{row['no_call']:>7.1%}  {total:>14.1%}")
    return "\n".join(lines)


def plot_invalid_calls(rows: Sequence[Mapping], title: str = "Replies that gave the harness nothing it could run"):
    """Grouped bars: one group per temperature, one bar per protocol, each split into "a call that
    cannot be run" (solid) and "no call at all" (hatched)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not rows:
        raise ValueError("rows is empty: pass invalid_call_rows(react, validity)")
    temperatures = sorted({row["temperature"] for row in rows})
    width = 0.8 / len(PROTOCOLS)
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for row in rows:
        index = PROTOCOLS.index(row["protocol"])
        x = temperatures.index(row["temperature"]) + (index - (len(PROTOCOLS) - 1) / 2) * width
        colour = PROTOCOL_COLOURS[row["protocol"]]
        ax.bar(x, row["unrunnable"], width, color=colour, edgecolor="white")
        ax.bar(x, row["no_call"], width, bottom=row["unrunnable"], color=colour, alpha=0.35, hatch="//",
               edgecolor="white")
        ax.text(x, row["unrunnable"] + row["no_call"] + 0.01, f"{row['unrunnable'] + row['no_call']:.0%}",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(temperatures)), [f"{t:g}" for t in temperatures])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("fraction of replies")
    ax.set_xlabel("sampling temperature")
    ax.set_title(title)
    handles = [Patch(color=PROTOCOL_COLOURS[p], label=p) for p in PROTOCOLS]
    handles += [Patch(facecolor="grey", label="a call that cannot be run"),
                Patch(facecolor="grey", alpha=0.35, hatch="//", label="no call at all")]
    ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- field order
FIELD_ORDER_LABELS = {"evidence_first": "running sums, then total", "conclusion_first": "total, then running sums"}


def read_field_order(path=None) -> dict:
    """The field-order experiment's results (``data/experiments/field_order/results.json``, or
    another file its build script wrote, such as ``results_3_to_6_300_steps.json``)."""
    import json
    from pathlib import Path

    from llmkit.paths import data_path

    source = Path(path) if path is not None else data_path("experiments", "field_order", "results.json")
    results = json.loads(source.read_text(encoding="utf-8"))
    for key in ("n", "evidence_first", "conclusion_first", "guess_most_common_total", "runs", "details"):
        if key not in results:
            raise ValueError(f"{source} has no {key!r}: rebuild it with "
                             f"python data/experiments/field_order/build.py")
    return results


def field_order_lines(results: Mapping) -> list[str]:
    """The experiment's outcome as sentences built from its figures: one per variant (means over
    the seeds), one per seed, and one for the difference, so a notebook's prose can point at
    printed numbers."""
    n, details, runs = results["n"], results["details"], results["runs"]
    fewest, most = results["settings"]["numbers_per_question"]
    lines = [f"{fewest}-{most} numbers per sum, {results['settings']['steps']} fine-tuning steps, {n} held-out sums, "
             f"{len(runs)} fine-tuning seed(s) per order (the mean over the seeds):"]
    for order, label in FIELD_ORDER_LABELS.items():
        d = details[order]
        lines.append(f"  {label:<26} total right {results[order]:.0%}; running sums all right "
                     f"{d['running_right']:.0%}; total equal to its own last sum "
                     f"{d['agrees_with_own_running']:.0%}; {d['mean_output_tokens']:.0f} output tokens on average")
    for run in runs:
        lines.append(f"  seed {run['seed']:>4}: running sums first {run['evidence_first']:.0%}, total first "
                     f"{run['conclusion_first']:.0%}, difference {run['effect']:+.0%}")
    lines.append(f"  evidence first minus conclusion first: {results['effect']:+.0%} "
                 f"(always guessing the commonest total: {results['guess_most_common_total']:.0%})")
    return lines


def plot_field_order(results: Mapping, title: str = "The same sums, two field orders"):
    """Bars: the share of held-out totals right for each field order (the mean over the seeds),
    a dot for each seed's own, and the score of guessing."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    labels = list(FIELD_ORDER_LABELS.values())
    scores = [results[order] for order in FIELD_ORDER_LABELS]
    bars = ax.bar(labels, scores, color=["tab:green", "tab:red"], width=0.55, alpha=0.8)
    for place, (bar, score, order) in enumerate(zip(bars, scores, FIELD_ORDER_LABELS)):
        ax.text(bar.get_x() + bar.get_width() * 0.8, score + 0.02, f"{score:.0%}", ha="center", va="bottom")
        seeds = [run[order] for run in results["runs"]]
        ax.scatter([place] * len(seeds), seeds, color="black", s=14, zorder=3,
                   label="one seed" if place == 0 else None)
    ax.axhline(results["guess_most_common_total"], color="grey", ls=":", lw=1,
               label="always the commonest total")
    ax.set_ylim(0, 1.1)
    fewest, most = results["settings"]["numbers_per_question"]
    ax.set_ylabel(f"totals right (of {results['n']} held-out sums)")
    ax.set_xlabel(f"order of the fields in the report_total call ({fewest}-{most} numbers per sum)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig
