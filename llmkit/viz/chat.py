"""Pictures of conversations: notebook 07's loss mask, notebook 08's prompts, growth and caching.

Notebook 07: each token is a chip coloured by where it came from (system, tools, user, tool
result, assistant). Control tokens are dark chips. Tokens the loss is computed on (what the
assistant wrote) have a solid border and full colour; the rest, which the model only reads, are
faded with a dashed border. ``token_rows`` and ``masked_text`` return plain data and text,
testable without a display; the HTML only draws them.

Notebook 08: ``prompt_html`` shows exactly what one request sends, with a string (a name) outlined
wherever it occurs (``text_positions``) and an optional cache breakpoint; ``plot_chat_growth`` and
``chat_growth_slider`` show a conversation re-sent every turn filling the context window and the
bill; ``plot_caching`` compares the same conversation with and without the prompt cache. The
numbers come from ``llmkit.chat.trace.request_rows`` of a recorded ``Trace``.
"""
from __future__ import annotations

import bisect
import html
from collections.abc import Sequence
from itertools import accumulate

from llmkit.checks import check_int
from llmkit.chat.template import Rendered
from llmkit.viz.first_taste import show_piece
from llmkit.course.profiling import median_time_to_first_token
from llmkit.chat.trace import RequestRow

ROLE_COLOURS = {"system": "#e2d9f3", "tools": "#fff3cd", "user": "#cce5ff", "tool_result": "#d1ecf1",
                "assistant": "#d4edda"}
HEADERS = ("<|system|>", "<|tools|>", "<|user|>", "<|assistant|>", "<|tool_result|>")


def token_rows(tokenizer, rendered: Rendered) -> list[dict]:
    """One dict per token: ``id``, ``piece`` (readable text), ``role``, ``trained`` (in the loss
    mask) and ``control`` (a chat marker rather than text)."""
    control_ids = set(tokenizer.special_tokens.values())
    return [{"id": token, "piece": show_piece(tokenizer.token_bytes(token)), "role": role, "trained": trained,
             "control": token in control_ids}
            for token, trained, role in zip(rendered.ids, rendered.mask, rendered.roles)]


def masked_text(tokenizer, rendered: Rendered, *, open_mark: str = "[", close_mark: str = "]",
                line_breaks: bool = True) -> str:
    """The decoded conversation with the trained spans wrapped in ``[ ]``.

    ``line_breaks`` starts a new line before each role header, only for reading: the template
    itself puts no newline there.
    """
    header_ids = {tokenizer.special_tokens[h] for h in HEADERS if h in tokenizer.special_tokens}
    out, inside = [], False
    for i, (token, trained) in enumerate(zip(rendered.ids, rendered.mask)):
        if trained != inside:
            out.append(open_mark if trained else close_mark)
            inside = trained
        if line_breaks and i and token in header_ids:
            out.append("\n")
        out.append(tokenizer.decode([token]))
    if inside:
        out.append(close_mark)
    return "".join(out)


def conversation_html(tokenizer, rendered: Rendered) -> str:
    """The conversation as chips (see the module docstring), a legend and the token counts."""
    rows = token_rows(tokenizer, rendered)
    chips = []
    for row in rows:
        if row["control"] and row["piece"] in HEADERS and chips:
            chips.append("<br>")
        background = "#343a40" if row["control"] else ROLE_COLOURS.get(row["role"], "#eeeeee")
        colour = "#fff" if row["control"] else "#000"
        border = "2px solid #198754" if row["trained"] else "1px dashed #999"
        opacity = "1" if row["trained"] else "0.55"
        title = f"id {row['id']}, {row['role']}, {'trained' if row['trained'] else 'not trained'}"
        chips.append(
            f'<span title="{html.escape(title)}" style="display:inline-block;margin:1px;padding:0 3px;'
            f'border-radius:3px;border:{border};opacity:{opacity};background:{background};color:{colour}">'
            f'<code style="color:inherit;background:none">{html.escape(row["piece"])}</code></span>')
    legend = " ".join(
        f'<span style="background:{colour};padding:0 4px;border-radius:3px;color:#000">{role}</span>'
        for role, colour in ROLE_COLOURS.items())
    n_trained = sum(row["trained"] for row in rows)
    summary = (f"{len(rows)} tokens, {n_trained} in the loss mask (solid border: written by the assistant, "
               f"trained on); faded with a dashed border: read only")
    return (f'<div class="llmkit-chat" style="line-height:1.9"><div>{summary}</div><div>{legend}</div>'
            f'<div>{"".join(chips)}</div></div>')


def show_conversation(tokenizer, rendered: Rendered):
    """Display :func:`conversation_html` in a notebook."""
    from IPython.display import HTML

    return HTML(conversation_html(tokenizer, rendered))


def trained_texts(tokenizer, rendered: Rendered) -> list[str]:
    """The decoded text of each stretch in the loss mask (``Rendered.assistant_spans``): exactly
    what fine-tuning teaches the model to write, one assistant turn at a time."""
    return [tokenizer.decode(rendered.ids[start:end]) for start, end in rendered.assistant_spans()]


def trained_texts_html(tokenizer, rendered: Rendered) -> str:
    """:func:`trained_texts` as a numbered list."""
    items = "".join(f"<li><code>{html.escape(text)}</code></li>" for text in trained_texts(tokenizer, rendered))
    return f"<div><b>What the loss trains on</b> (one item per assistant turn):<ol>{items}</ol></div>"


def conversation_explorer(tokenizer, *, kind: str = "weather", index: int = 0, split: str = "train",
                          seed: int = 0, examples: int = 20):
    """Pick a kind of training conversation and an example: see its tokens, coloured by role, with
    the loss mask, and the stretches the loss trains on.

    The conversations are ``make_conversations(examples, kinds=[kind], split=split, seed=seed)``,
    the same generator fine-tuning draws from.
    """
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    from llmkit.course.conversations import KINDS, make_conversations

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    if not 0 <= index < examples:
        raise ValueError(f"index must be between 0 and examples - 1 = {examples - 1}, got {index!r}")
    drawn: dict[str, list] = {}  # kind -> its conversations, made on first use

    def example(chosen_kind: str, i: int):
        if chosen_kind not in drawn:
            drawn[chosen_kind] = make_conversations(examples, split=split, seed=seed, kinds=[chosen_kind])
        return drawn[chosen_kind][i]

    kinds = widgets.Dropdown(options=list(KINDS), value=kind, description="kind")
    slider = widgets.IntSlider(value=index, min=0, max=examples - 1, description="example", continuous_update=False)
    picture = widgets.HTML()

    def redraw(_change=None) -> None:
        rendered = example(kinds.value, slider.value).render(tokenizer)
        picture.value = conversation_html(tokenizer, rendered) + trained_texts_html(tokenizer, rendered)

    kinds.observe(redraw, names="value")
    slider.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([kinds, slider]), picture])


# ---------------------------------------------------------------- notebook 08: what one request sends

def message_line(message: dict, limit: int = 100) -> str:
    """A message of a conversation on one line: its role, then each block (thinking, a tool call and a
    tool result are named as such), shortened to ``limit`` characters."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    parts = []
    for block in blocks:
        if block["type"] == "text":
            parts.append(block["text"])
        elif block["type"] == "thinking":
            parts.append(f"[thinking: {block['thinking']}]")
        elif block["type"] in ("tool_use", "server_tool_use"):
            arguments = block.get("input")
            shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items()) if isinstance(arguments, dict) else arguments
            who = "server tool call" if block["type"] == "server_tool_use" else "tool call"
            parts.append(f"[{who}: {block.get('name', '?')}({shown})]")
        elif block["type"] in ("tool_result", "server_tool_result"):
            who = "server tool result" if block["type"] == "server_tool_result" else "tool result"
            parts.append(f"[{who}{' (error)' if block.get('is_error') else ''}: {block['content']}]")
        else:
            parts.append(f"[{block['type']}]")
    text = " ".join(" ".join(parts).split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return f"{message['role']:>9}: {text}"


def text_positions(tokenizer, rendered: Rendered, text: str) -> list[int]:
    """The positions of every token that holds part of ``text``, wherever it occurs in the prompt.

    A name is often several tokens (" A", "d", "a"), and the split depends on its neighbours, so we
    search the prompt's bytes rather than the ids of ``text`` encoded on its own."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"text must be a non-empty string to look for, such as 'Ada'; got {text!r}")
    pieces = [tokenizer.token_bytes(token) for token in rendered.ids]
    starts = list(accumulate((len(piece) for piece in pieces), initial=0))  # byte offset of each token
    joined, needle = b"".join(pieces), text.encode("utf-8")
    positions: set[int] = set()
    found = joined.find(needle)
    while found >= 0:
        first = bisect.bisect_right(starts, found) - 1
        last = bisect.bisect_left(starts, found + len(needle)) - 1
        positions.update(range(first, last + 1))
        found = joined.find(needle, found + 1)
    return sorted(positions)


def prompt_html(tokenizer, rendered: Rendered, *, highlight: str | None = None,
                breakpoint: int | None = None) -> str:
    """One request's prompt as chips coloured by role, as the model reads it.

    ``highlight``: outline in red every token holding part of this string, and say whether it is in
    the prompt at all. ``breakpoint``: draw a cache breakpoint before that token position (the end
    of the stable prefix: the system prompt and tools)."""
    if breakpoint is not None and not 0 <= breakpoint <= len(rendered):
        raise ValueError(f"breakpoint must be a token position from 0 to {len(rendered)}, got {breakpoint}")
    marked = set(text_positions(tokenizer, rendered, highlight)) if highlight is not None else set()
    rows = token_rows(tokenizer, rendered)
    chips = []
    for position, row in enumerate(rows):
        if position == breakpoint:
            chips.append('<span style="display:inline-block;margin:1px 4px;padding:0 4px;border-left:4px solid '
                         '#dc3545;color:#dc3545;font-weight:bold">cache breakpoint</span>')
        if row["control"] and row["piece"] in HEADERS and position:
            chips.append("<br>")
        background = "#343a40" if row["control"] else ROLE_COLOURS.get(row["role"], "#eeeeee")
        colour = "#fff" if row["control"] else "#000"
        border = "3px solid #dc3545" if position in marked else "1px solid transparent"
        title = html.escape(f"position {position}, id {row['id']}, {row['role']}")
        chips.append(
            f'<span title="{title}" '
            f'style="display:inline-block;margin:1px;padding:0 3px;border-radius:3px;border:{border};'
            f'background:{background};color:{colour}"><code style="color:inherit;background:none">'
            f'{html.escape(row["piece"])}</code></span>')
    if breakpoint == len(rows):
        chips.append('<span style="color:#dc3545;font-weight:bold">| cache breakpoint</span>')
    summary = f"{len(rows)} tokens"
    if highlight is not None:
        summary += (f"; {highlight!r} is in this prompt: {len(marked)} tokens, outlined in red" if marked
                    else f"; {highlight!r} is not in this prompt: not one token of it")
    legend = " ".join(
        f'<span style="background:{colour};padding:0 4px;border-radius:3px;color:#000">{role}</span>'
        for role, colour in ROLE_COLOURS.items())
    return (f'<div class="llmkit-prompt" style="line-height:1.9"><div><b>{html.escape(summary)}</b></div>'
            f'<div>{legend}</div><div>{"".join(chips)}</div></div>')


def show_prompt(tokenizer, rendered: Rendered, *, highlight: str | None = None, breakpoint: int | None = None):
    """Display :func:`prompt_html` in a notebook."""
    from IPython.display import HTML

    return HTML(prompt_html(tokenizer, rendered, highlight=highlight, breakpoint=breakpoint))


# ---------------------------------------------------------------- notebook 08: a conversation growing

GROWTH_PARTS = (("system + tools", "#b39ddb"), ("earlier messages", "#adb5bd"), ("new message", "#4dabf7"),
                ("reply", "#51cf66"))


def _growth_parts(row: RequestRow) -> dict[str, int]:
    return {"system + tools": row.system + row.tools, "earlier messages": row.history,
            "new message": row.new_message, "reply": row.usage.output_tokens}


def _check_rows(rows: Sequence[RequestRow], context_window: int) -> None:
    if not rows:
        raise ValueError("rows is empty: pass request_rows(trace) of a conversation with at least one turn")
    check_int("context_window", context_window, minimum=1)


def plot_chat_growth(rows: Sequence[RequestRow], context_window: int, *, upto: int | None = None,
                     title: str = "A chat re-sends the whole conversation every turn"):
    """Left: what each turn's request holds (system and tools, earlier messages, the new message,
    then the reply it gets), against the context window. Right: each turn's bill and the total so
    far. ``upto`` draws only the first ``upto`` turns, on the axes of all of them."""
    import matplotlib.pyplot as plt

    _check_rows(rows, context_window)
    shown = rows[:len(rows) if upto is None else upto]
    if not shown or (upto is not None and not 1 <= upto <= len(rows)):
        raise ValueError(f"upto must be between 1 and {len(rows)}, got {upto}")
    turns = [row.number for row in shown]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    bottom = [0] * len(shown)
    for part, colour in GROWTH_PARTS:
        heights = [_growth_parts(row)[part] for row in shown]
        left.bar(turns, heights, bottom=bottom, color=colour, label=part)
        bottom = [a + b for a, b in zip(bottom, heights)]
    left.axhline(context_window, color="tab:red", linestyle="--", label=f"context window ({context_window})")
    left.set_xlim(0.4, len(rows) + 0.6)
    left.set_ylim(0, context_window * 1.12)
    left.set_xlabel("turn")
    left.set_ylabel("tokens")
    left.set_title("What each request carries")
    left.legend(fontsize=7, loc="upper left")
    costs = [row.cost for row in shown]
    right.bar(turns, costs, color="tab:blue", label="this turn")
    right.plot(turns, list(accumulate(costs)), "o-", color="tab:red", label="conversation so far")
    right.set_xlim(0.4, len(rows) + 0.6)
    right.set_ylim(0, 1.1 * sum(row.cost for row in rows))
    _dollar_panel(right, "The bill")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _dollar_panel(ax, title: str) -> None:
    """Finish a panel of dollars per turn: the amounts are millionths, so scientific ticks."""
    ax.set_xlabel("turn")
    ax.set_ylabel("dollars")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left")


def context_fill_html(row: RequestRow, context_window: int) -> str:
    """One turn as a bar of the context window: how much of it the request and its reply fill."""
    _check_rows([row], context_window)
    segments = []
    for part, colour in GROWTH_PARTS:
        tokens = _growth_parts(row)[part]
        if tokens:
            segments.append(f'<div title="{html.escape(part)}: {tokens} tokens" style="width:'
                            f'{100 * tokens / context_window:.2f}%;background:{colour}"></div>')
    used = row.billed_tokens
    legend = " ".join(f'<span style="background:{colour};padding:0 4px;border-radius:3px">{html.escape(part)} '
                      f'{_growth_parts(row)[part]}</span>' for part, colour in GROWTH_PARTS)
    return (f'<div style="display:flex;height:22px;border:1px solid #333;background:#fff;max-width:640px">'
            f'{"".join(segments)}</div><div style="font-size:90%">{legend}; {used} of {context_window} '
            f'tokens ({100 * used / context_window:.0f}% of the window)</div>')


def chat_growth_slider(rows: Sequence[RequestRow], context_window: int, *, turn: int = 1):
    """A turn slider over a recorded conversation: the context window filling and the bill adding up."""
    from llmkit.viz.sampling import picture_slider

    _check_rows(rows, context_window)

    def describe(turns: int) -> str:
        row = rows[turns - 1]
        so_far = sum(r.cost for r in rows[:turns])
        return (f"<p>Turn <b>{row.number}</b>: the request carries <b>{row.prompt_tokens}</b> tokens for a "
                f"{row.new_message}-token new message; the reply adds {row.usage.output_tokens} "
                f"(stop reason {html.escape(row.stop_reason)}). This turn costs ${row.cost:.6f}; the "
                f"conversation so far ${so_far:.6f}.</p>" + context_fill_html(row, context_window))

    return picture_slider(len(rows), lambda turns: plot_chat_growth(rows, context_window, upto=turns), describe,
                          start=turn, description="turns")


def plot_caching(cached_runs: Sequence[Sequence[RequestRow]], uncached_runs: Sequence[Sequence[RequestRow]],
                 title: str = "The same conversation with and without the prompt cache"):
    """Left: each turn's prompt, split into tokens read from the cache and tokens computed. Middle:
    time to first token per turn (median over the runs). Right: each turn's bill, both ways."""
    import matplotlib.pyplot as plt

    cached, uncached = median_time_to_first_token(cached_runs), median_time_to_first_token(uncached_runs)
    if len(cached) != len(uncached):
        raise ValueError(f"the runs with and without the cache must have the same turns, got {len(cached)} "
                         f"and {len(uncached)}")
    rows, plain = cached_runs[0], uncached_runs[0]
    turns = [row.number for row in rows]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(12, 3.5))
    cached_tokens = [r.usage.cache_read_input_tokens for r in rows]
    left.bar(turns, cached_tokens, color="tab:green", label="read from the cache")
    left.bar(turns, [r.usage.input_tokens for r in rows], bottom=cached_tokens, color="tab:red",
             label="computed (prefill)")
    left.set_xlabel("turn")
    left.set_ylabel("prompt tokens")
    left.set_title("Where the prompt came from")
    left.legend(fontsize=7, loc="upper left")
    middle.plot(turns, [1000 * t for t in uncached], "o-", color="tab:red", label="no prompt cache")
    middle.plot(turns, [1000 * t for t in cached], "o-", color="tab:green", label="with the prompt cache")
    middle.set_ylim(bottom=0)
    middle.set_xlabel("turn")
    middle.set_ylabel("time to first token (ms)")
    middle.set_title("Waiting for the first token")
    middle.legend(fontsize=7, loc="upper left")
    width = 0.4
    right.bar([t - width / 2 for t in turns], [r.cost for r in plain], width, color="tab:red",
              label="no prompt cache")
    right.bar([t + width / 2 for t in turns], [r.cost for r in rows], width, color="tab:green",
              label="with the prompt cache")
    _dollar_panel(right, "The bill per turn")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
