"""Notebook pictures of a ``llmkit.chat.trace.Trace``: where the time and the money of a request went.

Plain data first (testable without a display): ``timeline_rows`` (one row per timed event),
``event_story`` (one event in words), ``result_tokens`` (a tool result as the tokens the model
reads) and ``itemised_bill`` (the bill as text: thinking split out of the output, the search fee
beside it), from ``llmkit.chat.trace.request_rows`` (one ``RequestRow`` per request). Then the
pictures: ``plot_trace`` (prefill, decode and tool runs as bars), ``plot_timeline`` (the same
story with the harness's steps and thinking marked, notebook 10), ``plot_bill`` (tokens and
dollars per request) and ``trace_stepper``, a slider that walks through the events one at a time.
"""
from __future__ import annotations

import html
from collections.abc import Sequence

from llmkit.chat.template import server_result_ids
from llmkit.chat.trace import Event, RequestRow, Trace
from llmkit.viz.first_taste import show_piece

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
            label = f"{event.data['input_tokens']} read, {event.data['cache_read_input_tokens']} cached"
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


# ---------------------------------------------------------------- in words

def _call_text(content: list[dict]) -> str:
    calls = [block for block in content if block["type"] == "tool_use"]
    if not calls:
        return "(no readable call)"
    call = calls[0]
    if "error" in call or not isinstance(call.get("input"), dict):
        return f"a call the harness cannot read ({call.get('error', 'not JSON')})"
    arguments = ", ".join(f"{key}={value!r}" for key, value in call["input"].items())
    return f"{call['name']}({arguments})"


def event_story(event: Event) -> str:
    """One event of a trace in plain words: what happened, and who did it (the model or our code)."""
    d, ms = event.data, 1000 * event.duration
    if event.kind == "request":
        return (f"Request {d.get('id', d.get('request'))} leaves the app. The model keeps nothing between requests: "
                f"it sees only what this one carries.")
    if event.kind == "context":
        dropped = (f" The context policy dropped the {d['dropped_messages']} oldest message(s) to fit the window."
                   if d.get("dropped_messages") else "")
        return (f"The harness builds the prompt: {d['total']} tokens = system prompt {d['system']} + tool "
                f"definitions {d['tools']} + earlier messages re-sent {d['history']} + the new message "
                f"{d['new_message']}.{dropped}")
    if event.kind == "prefill":
        return (f"The model reads the prompt in one pass: {d['cache_read_input_tokens']} tokens come from the prompt "
                f"cache (kept from an earlier request with the same start), {d['input_tokens']} are computed. "
                f"The first new token comes after {ms:.1f} ms.")
    if event.kind == "thinking":
        return (f"It thinks first: {d['tokens']} tokens, generated one at a time like any other output and "
                f"billed as output, before it answers.")
    if event.kind == "answer":
        reason, tokens = d["stop_reason"], d["output_tokens"]
        if reason == "tool_use":
            what = (f"It writes a tool call, {_call_text(d.get('content', []))}, and stops (stop reason tool_use). "
                    f"The call is only text: the model runs nothing.")
        elif reason == "end_turn":
            what = f"It writes its answer, {d['text']!r}, and ends it with <|end_turn|> (stop reason end_turn)."
        else:
            what = f"It writes {d['text']!r} and stops with stop reason {reason}."
        return f"{what} {tokens} output tokens, written in {ms:.1f} ms."
    if event.kind == "bill":
        bill = d["bill"]
        searches = f", {bill.server_tool_calls} server tool call(s)" if bill.server_tool_calls else ""
        return (f"This request's bill: {bill.input_tokens} input tokens, {bill.cache_read_input_tokens} cache reads, "
                f"{bill.output_tokens} output tokens ({bill.thinking_tokens} of them thinking){searches} "
                f"= ${bill.total:.6f}.")
    if event.kind == "tool_call":
        error = " It failed; the error goes back to the model as the result." if d.get("is_error") else ""
        arguments = ", ".join(f"{k}={v!r}" for k, v in d["input"].items()) if isinstance(d.get("input"), dict) else ""
        if d.get("server"):
            return (f"{d['name']} is a server tool: the API runs {d['name']}({arguments}) itself, inside the "
                    f"same request, in {ms:.1f} ms, and the model reads the result straight away.{error}")
        return f"The harness (our code, not the model) runs {d['name']}({arguments}) in {ms:.1f} ms.{error}"
    if event.kind == "tool_result":
        tokens = "?" if d.get("tokens") is None else d["tokens"]
        return f"The result goes back to the model as {tokens} tokens of the next request: {d['content']}"
    if event.kind == "final":
        return (f"The loop ends: the model answered instead of asking for a tool (stop reason {d['stop_reason']}). "
                f"The app shows: {d['text']!r}")
    return f"{event.kind}: " + ", ".join(f"{key}={value}" for key, value in d.items())


def without_ids(messages: list[dict]) -> list:
    """The messages as the model wrote them, less the ids the client gives each tool call (new on
    every run), so two runs of the same conversation can be compared block for block."""
    return [[{key: value for key, value in block.items() if key not in ("id", "tool_use_id")}
             for block in message["content"]] if isinstance(message["content"], list) else message["content"]
            for message in messages]


def result_tokens(tokenizer, block: dict) -> list[str]:
    """A tool result as the model reads it: one readable piece per token, from the result marker
    through the content to the ``<|assistant|>`` header after which the model writes again. A
    result is not a message to the model, just more tokens of its context."""
    return [show_piece(tokenizer.token_bytes(token)) for token in server_result_ids(tokenizer, block)]


def itemised_bill(rows: Sequence[RequestRow]) -> str:
    """The bill per request (cache reads, new input, output split into thinking and text, server tool
    calls such as web searches), then every line of the total bill in dollars."""
    if not rows:
        raise ValueError("rows is empty: pass request_rows(trace) of a trace with at least one request")
    header = (f"{'request':<10}{'cache read':>11}{'input':>8}{'thinking':>10}{'text out':>10}{'searches':>10}"
              f"{'dollars':>12}")
    lines = [header]
    for row in rows:
        bill = row.bill
        lines.append(f"{row.id:<10}{bill.cache_read_input_tokens:>11}{bill.input_tokens:>8}{bill.thinking_tokens:>10}"
                     f"{bill.output_tokens - bill.thinking_tokens:>10}{bill.server_tool_calls:>10}{row.cost:>12.6f}")
    total = rows[0].bill
    for row in rows[1:]:
        total = total + row.bill
    return "\n".join(lines + ["", str(total)])


# ---------------------------------------------------------------- pictures

BILL_COLOURS = {"cache read": "tab:green", "input": "tab:blue", "output: thinking": "tab:purple",
                "output: text": "tab:orange", "server tool calls": "tab:red"}  # Bill.lines, in order


def plot_bill(rows: Sequence[RequestRow], title: str = "The bill, itemised"):
    """Per request: tokens (left) and dollars (right), split as the bill is: cache reads, new input,
    thinking, text output and the server tool calls' fee (dollars without tokens). Output is few
    tokens but much of the money; a search fee can outweigh all the tokens."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("rows is empty: pass request_rows(trace) of a trace with at least one request")
    labels = [f"{row.number}\n{row.stop_reason}" for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    tokens_bottom, dollars_bottom = [0.0] * len(rows), [0.0] * len(rows)
    for index, (part, colour) in enumerate(BILL_COLOURS.items()):
        bill_lines = [row.bill.lines[index] for row in rows]
        tokens = [line.count if line.unit == "tok" else 0 for line in bill_lines]  # a fee has no tokens
        dollars = [line.dollars for line in bill_lines]
        left.bar(labels, tokens, bottom=tokens_bottom, color=colour, label=part)
        right.bar(labels, dollars, bottom=dollars_bottom, color=colour, label=part)
        tokens_bottom = [a + b for a, b in zip(tokens_bottom, tokens)]
        dollars_bottom = [a + b for a, b in zip(dollars_bottom, dollars)]
    left.set_xlabel("request (and its stop reason)")
    left.set_ylabel("tokens")
    left.set_title("Tokens")
    right.set_xlabel("request (and its stop reason)")
    right.set_ylabel("dollars")
    right.set_title("Dollars")
    right.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    left.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{title} (total ${sum(row.cost for row in rows):.6f})")
    fig.tight_layout()
    return fig


TIMELINE_LANES = ("harness (our code)", "prefill (read the prompt)", "decode (write the reply)")
# marker, colour, legend text and height within the harness lane (events that happen at almost the
# same moment, such as a bill and the next tool run, then stay visible side by side)
MARKERS = {"request": (">", "black", "request sent", 0.0),
           "tool_result": ("<", "tab:green", "tool result sent back", 0.0),
           "bill": (r"$\$$", "tab:red", "bill", -0.3),
           "final": ("*", "gold", "final answer shown", 0.25)}


def _thinking_share(events: list[Event], index: int) -> tuple[float, float]:
    """For the thinking event at ``index``: the start and length of its part of the next decode bar.
    The trace records thinking as a token count; a decode step takes about the same time for every
    token, so its share of the bar is its share of the output tokens."""
    thinking = events[index]
    answer = next((e for e in events[index + 1:] if e.kind == "answer"), None)
    if answer is None or not answer.data.get("output_tokens"):
        return thinking.t, 0.0
    return answer.t, answer.duration * min(thinking.data["tokens"] / answer.data["output_tokens"], 1.0)


def plot_timeline(trace: Trace, *, upto: int | None = None, title: str = "One request, traced"):
    """The trace as a timeline in three lanes: our code (requests sent, tool runs, results, the bill),
    the model's prefill, and its decode with the thinking part hatched.

    ``upto`` draws only the first ``upto`` events (in time order) and outlines the last one in red,
    for stepping through; the axes keep the whole trace's scale."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    events = sorted(trace.events, key=lambda event: event.t)
    if not events:
        raise ValueError("the trace is empty: record one with Client.messages.create(..., trace=trace) first")
    shown = len(events) if upto is None else upto
    if not 1 <= shown <= len(events):
        raise ValueError(f"upto must be between 1 and {len(events)} (the number of events), got {upto}")
    span_ms = 1000 * max(event.t + event.duration for event in events) or 1.0
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for index, event in enumerate(events[:shown]):
        current = index == shown - 1 and upto is not None
        edge = {"edgecolor": "red", "linewidth": 2.0} if current else {"edgecolor": "black", "linewidth": 0.5}
        start, width, lane = 1000 * event.t, max(1000 * event.duration, span_ms / 250), None
        if event.kind == "prefill":
            lane, colour, label = 1, "tab:blue", (f"{event.data['input_tokens']} new + "
                                                  f"{event.data['cache_read_input_tokens']} cached")
        elif event.kind == "answer":
            lane, colour, label = 2, "tab:orange", f"{event.data['output_tokens']} tokens, {event.data['stop_reason']}"
        elif event.kind == "tool_call":
            lane, colour, label = 0, "tab:green", event.data.get("name", "tool") + (
                " (server tool, run by the API)" if event.data.get("server") else "")
        elif event.kind == "thinking":
            thinking_start, thinking_width = _thinking_share(events, index)
            ax.barh(2, max(1000 * thinking_width, span_ms / 250), left=1000 * thinking_start, height=0.6,
                    color="tab:purple", hatch="//", zorder=3, **edge)
            continue
        elif event.kind in MARKERS:
            marker, colour, _, height = MARKERS[event.kind]
            ax.plot([start], [height], marker=marker, markersize=11 if current else 8, color=colour,
                    markeredgecolor="red" if current else colour, linestyle="none", zorder=4)
            continue
        else:  # "context" happens at the same moment as its request: the request marker stands for it
            if current:
                ax.axvline(start, color="red", linestyle=":", linewidth=1)
            continue
        ax.barh(lane, width, left=start, height=0.6, color=colour, zorder=2, **edge)
        ax.annotate(label, (start, lane - 0.38), fontsize=7)
    ax.set_yticks(range(len(TIMELINE_LANES)), TIMELINE_LANES)
    ax.set_ylim(-0.7, len(TIMELINE_LANES) - 0.3)
    ax.invert_yaxis()
    ax.set_xlim(-0.01 * span_ms, 1.03 * span_ms)
    ax.set_xlabel("time since the trace started (ms)")
    handles = [Patch(color="tab:blue", label="prefill"), Patch(color="tab:orange", label="decode"),
               Patch(facecolor="tab:purple", hatch="//", label="thinking (its share of the decode)"),
               Patch(color="tab:green", label="tool run")]
    handles += [Line2D([], [], marker=marker, color=colour, linestyle="none", label=text)
                for marker, colour, text, _ in MARKERS.values()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"{title} (total ${trace.bill().total:.6f})")
    fig.tight_layout()
    return fig


def trace_stepper(trace: Trace, *, step: int = 1):
    """A slider over the events of a trace: each step says what happened in words and draws the
    timeline up to that event (outlined in red)."""
    from llmkit.viz.sampling import picture_slider

    events = sorted(trace.events, key=lambda event: event.t)
    if not events:
        raise ValueError("the trace is empty: record one with Client.messages.create(..., trace=trace) first")

    def describe(step: int) -> str:
        event = events[step - 1]
        return (f"<p>Step <b>{step}</b> of {len(events)}, at {1000 * event.t:.1f} ms: "
                f"<b>{html.escape(event.kind)}</b>. {html.escape(event_story(event))}</p>")

    return picture_slider(len(events), lambda step: plot_timeline(trace, upto=step), describe, start=step)
