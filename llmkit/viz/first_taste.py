"""Notebook 00's first taste: type text, watch it become UTF-8 bytes and cl100k_base tokens.

A model never sees characters. Text is first encoded as UTF-8 bytes (1 to 4 bytes per
character), and a tokenizer then groups those bytes into tokens, each an integer id. This file
holds the breakdown (plain data, testable without a display) and the widget that redraws it on
every keystroke.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from llmkit.tokens.cl100k import get_cl100k

DEFAULT_TEXT = "When will it rain in Mumbai?"
# Pale colours so neighbouring tokens are easy to tell apart; black text stays readable on each.
TOKEN_COLOURS = ("#cce5ff", "#d4edda", "#fff3cd", "#f8d7da", "#e2d9f3", "#d1ecf1")


@dataclass(frozen=True)
class Breakdown:
    """One text seen three ways: characters, UTF-8 bytes, and cl100k_base tokens."""

    text: str
    utf8: bytes
    token_ids: list[int]
    pieces: list[bytes]  # the bytes of each token; together they are exactly `utf8`

    def __str__(self) -> str:
        return (f"text:   {self.text!r} ({len(self.text)} characters)\n"
                f"bytes:  {list(self.utf8)} ({len(self.utf8)} UTF-8 bytes)\n"
                f"tokens: {self.token_ids} ({len(self.token_ids)} cl100k_base tokens)\n"
                f"pieces: {' | '.join(show_piece(p) for p in self.pieces)}")


def breakdown(text: str, encoding=None) -> Breakdown:
    """Encode ``text`` as UTF-8 bytes and as cl100k_base tokens (special tokens as plain text)."""
    encoding = encoding or get_cl100k()
    ids = encoding.encode(text, disallowed_special=())
    return Breakdown(text, text.encode("utf-8"), ids, [encoding.decode_single_token_bytes(i) for i in ids])


def show_piece(piece: bytes) -> str:
    """A token's bytes as readable text: spaces as '␣', newlines as '↵', and a partial UTF-8
    character (a token can end in the middle of one) as its byte escapes, e.g. '\\xe0\\xa4'."""
    text = piece.decode("utf-8", errors="backslashreplace")
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def breakdown_html(b: Breakdown) -> str:
    """The breakdown as HTML: counts, the byte values, and one coloured chip per token."""
    chips = "".join(
        f'<span style="display:inline-block;margin:2px;padding:1px 4px;border-radius:3px;'
        f'background:{TOKEN_COLOURS[i % len(TOKEN_COLOURS)]};color:#000;text-align:center">'
        f'<code>{html.escape(show_piece(piece))}</code><br><small>{token_id}</small></span>'
        for i, (token_id, piece) in enumerate(zip(b.token_ids, b.pieces))
    )
    byte_values = " ".join(str(byte) for byte in b.utf8)
    return (
        '<div class="llmkit-first-taste" style="line-height:1.5">'
        f"<p><b>{len(b.text)}</b> characters &rarr; <b>{len(b.utf8)}</b> UTF-8 bytes "
        f"&rarr; <b>{len(b.token_ids)}</b> cl100k_base tokens</p>"
        f'<p>UTF-8 bytes:<br><code style="word-break:break-word">{byte_values}</code></p>'
        f"<p>Tokens (piece above, id below):<br>{chips}</p>"
        f'<p>Token ids: <code style="word-break:break-word">{b.token_ids}</code></p>'
        "</div>"
    )


def first_taste(text: str = DEFAULT_TEXT):
    """A text box and, below it, its bytes and tokens, redrawn as you type."""
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    encoding = get_cl100k()
    box = widgets.Textarea(value=text, description="Your text:", continuous_update=True,
                           layout=widgets.Layout(width="95%", height="4em"))
    view = widgets.HTML(breakdown_html(breakdown(text, encoding)))

    def redraw(change) -> None:
        view.value = breakdown_html(breakdown(change["new"], encoding))

    box.observe(redraw, names="value")
    return widgets.VBox([box, view])
