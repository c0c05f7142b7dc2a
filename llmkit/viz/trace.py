"""Notebook pictures of a ``llmkit.trace.Trace``: where the time of a request or an agent run went.

``timeline_rows`` turns the events into plain rows (testable without a display);
``plot_trace`` draws them as a timeline: prefill, decode and tool runs as bars, one lane each.
"""
from __future__ import annotations

from llmkit.trace import Trace

LANES = {"prefill": "prefill (reading the prompt)", "answer": "decode (writing the reply)",
         "tool_call": "tool run (the harness)"}
COLOURS = {"prefill": "tab:blue", "answer": "tab:orange", "tool_call": "tab:green"}


def timeline_rows(trace: Trace) -> list[dict]:
    """One row per timed event: ``kind``, ``lane``, ``start`` and ``end`` (ms), and a short ``label``."""
    rows = []
    for event in trace.events:
        if event.kind not in LANES:
            continue
        if event.kind == "prefill":
            label = f"{event.data['input_tokens']} read, {event.data['cache_read_tokens']} cached"
        elif event.kind == "answer":
            label = f"{event.data['output_tokens']} tokens, {event.data['stop_reason']}"
        else:
            label = event.data["name"] + (" (error)" if event.data.get("is_error") else "")
        rows.append(dict(kind=event.kind, lane=LANES[event.kind], start=1000 * event.t,
                         end=1000 * (event.t + event.duration), label=label))
    return rows


def plot_trace(trace: Trace, title: str = "Where the time went"):
    """A timeline of the trace: one lane per kind of work, one bar per prefill, decode or tool run."""
    import matplotlib.pyplot as plt

    rows = timeline_rows(trace)
    lanes = list(LANES.values())
    fig, ax = plt.subplots(figsize=(8, 2.6))
    for row in rows:
        y = lanes.index(row["lane"])
        ax.barh(y, max(row["end"] - row["start"], 0.5), left=row["start"], height=0.6,
                color=COLOURS[row["kind"]], edgecolor="black", linewidth=0.5)
        ax.annotate(row["label"], (row["start"], y + 0.38), fontsize=7)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.6, len(lanes) - 0.1)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("time since the trace started (ms)")
    ax.set_title(f"{title} (total ${trace.bill().total:.6f})")
    fig.tight_layout()
    return fig
