"""Notebook 07's picture: a rendered conversation as coloured tokens, with the loss mask visible.

Each token is a chip coloured by where it came from (system, tools, user, tool result,
assistant). Control tokens are dark chips. Tokens the loss is computed on (what the assistant
wrote) have a solid border and full colour; the rest, which the model only reads, are faded with
a dashed border. ``token_rows`` and ``masked_text`` return plain data and text, testable without
a display; the HTML only draws them.
"""
from __future__ import annotations

import html

from llmkit.chat_template import Rendered
from llmkit.viz.first_taste import show_piece

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
