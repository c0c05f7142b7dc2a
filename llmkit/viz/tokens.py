"""Notebook 01's pictures: coloured token pieces, BPE merge by merge, and the vocabulary trade-off.

The data functions (``pieces``, ``bpe_steps``, ``characters_per_token``) return plain Python and
are tested without a display; the HTML, plots and the comparison widget only draw what they return.
"""
from __future__ import annotations

import html
from collections.abc import Mapping

from llmkit.tokens.tokenizer import Tokenizer
from llmkit.viz.first_taste import TOKEN_COLOURS, show_piece

DEFAULT_TEXT = "A capybara ate my strawberry"


def pieces(tokenizer: Tokenizer, text: str) -> list[tuple[int, bytes]]:
    """``(id, bytes)`` for each token of ``text`` (special-token text encoded as plain text)."""
    return [(token_id, tokenizer.token_bytes(token_id)) for token_id in tokenizer.encode(text, disallowed_special=())]


def chips_html(token_pieces: list[tuple[int, bytes]]) -> str:
    """One coloured chip per token: the piece (spaces as ␣, newlines as ↵) above its id."""
    return "".join(
        f'<span style="display:inline-block;margin:2px;padding:1px 4px;border-radius:3px;'
        f'background:{TOKEN_COLOURS[i % len(TOKEN_COLOURS)]};color:#000;text-align:center">'
        f"<code>{html.escape(show_piece(piece))}</code><br><small>{token_id}</small></span>"
        for i, (token_id, piece) in enumerate(token_pieces)
    )


def tokens_html(tokenizers: Mapping[str, Tokenizer], text: str) -> str:
    """For each named tokenizer: its token count, the coloured pieces, and the ids."""
    rows = []
    for name, tokenizer in tokenizers.items():
        token_pieces = pieces(tokenizer, text)
        ids = [token_id for token_id, _ in token_pieces]
        per_token = f"{len(text) / len(ids):.2f} characters per token" if ids else "no tokens"
        rows.append(
            f'<div style="margin-bottom:0.8em"><b>{html.escape(name)}</b>: {len(ids)} tokens '
            f"for {len(text)} characters ({per_token})<br>{chips_html(token_pieces)}<br>"
            f'<code style="word-break:break-word">{ids}</code></div>'
        )
    return '<div class="llmkit-tokens" style="line-height:1.5">' + "".join(rows) + "</div>"


def show_tokens(tokenizers: Mapping[str, Tokenizer], text: str):
    """Display :func:`tokens_html` in a notebook."""
    from IPython.display import HTML

    return HTML(tokens_html(tokenizers, text))


def compare_tokens(tokenizers: Mapping[str, Tokenizer], text: str = DEFAULT_TEXT):
    """A text box and, below it, the text as tokens of each tokenizer, redrawn as you type."""
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    box = widgets.Textarea(value=text, description="Your text:", continuous_update=True,
                           layout=widgets.Layout(width="95%", height="4em"))
    view = widgets.HTML(tokens_html(tokenizers, text))

    def redraw(change) -> None:
        view.value = tokens_html(tokenizers, change["new"])

    box.observe(redraw, names="value")
    return widgets.VBox([box, view])


# ---------------------------------------------------------------- BPE, merge by merge
def bpe_steps(text: str, n_merges: int, *, pattern: str | None = None) -> list[dict]:
    """Train on ``text`` alone and record, after each merge, the merged pair and the new tokens.

    Step 0 is the raw UTF-8 bytes. ``pattern=None`` lets merges cross word boundaries, which
    makes the idea easy to see on one short sentence.
    """
    trained = Tokenizer.train(text, 256 + n_merges, pattern=pattern)
    merges = list(trained.merges)
    steps = []
    for k in range(n_merges + 1):
        tokenizer = Tokenizer.from_merges(merges[:k], pattern=pattern, special_tokens=[])
        merged = None
        if k:
            left, right = merges[k - 1]
            merged = (trained.token_bytes(left), trained.token_bytes(right), trained.token_bytes(256 + k - 1))
        steps.append({"step": k, "merged": merged, "pieces": pieces(tokenizer, text)})
    return steps


def bpe_steps_html(steps: list[dict]) -> str:
    """One row per merge: which pair became a token, and the sentence as tokens afterwards."""
    rows = []
    for step in steps:
        if step["merged"] is None:
            what = "start: one token per byte"
        else:
            left, right, new = (html.escape(show_piece(p)) for p in step["merged"])
            what = f"merge <code>{left}</code> + <code>{right}</code> &rarr; <code>{new}</code>"
        rows.append(
            f'<tr><td style="text-align:right">{step["step"]}</td><td style="text-align:left">{what}</td>'
            f'<td style="text-align:right">{len(step["pieces"])}</td>'
            f'<td style="text-align:left">{chips_html(step["pieces"])}</td></tr>'
        )
    header = "<tr><th>step</th><th>what changed</th><th>tokens</th><th>the sentence as tokens</th></tr>"
    return f'<table class="llmkit-bpe-steps">{header}{"".join(rows)}</table>'


# ---------------------------------------------------------------- how many characters per token
def characters_per_token(samples: Mapping[str, str], tokenizers: Mapping[str, Tokenizer]) -> list[dict]:
    """For each sample text: its length in characters and characters per token for each tokenizer."""
    rows = []
    for label, text in samples.items():
        row = {"text": label, "characters": len(text)}
        for name, tokenizer in tokenizers.items():
            n_tokens = len(tokenizer.encode(text, disallowed_special=()))
            row[name] = len(text) / n_tokens
        rows.append(row)
    return rows


def format_table(rows: list[dict], digits: int = 2) -> str:
    """Rows of dicts as an aligned text table, floats rounded (stable across machines)."""
    columns = list(rows[0])
    cells = [[f"{row[c]:.{digits}f}" if isinstance(row[c], float) else str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(columns, widths)))]
    lines += ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in cells]
    return "\n".join(lines)


def plot_characters_per_token(rows: list[dict], tokenizer_names: list[str]):
    """Grouped bars: characters per token for each text and tokenizer."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(tokenizer_names)
    for j, name in enumerate(tokenizer_names):
        xs = [i + (j - (len(tokenizer_names) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [row[name] for row in rows], width=width, label=name)
    ax.set_xticks(range(len(rows)), [row["text"] for row in rows])
    ax.set_ylabel("characters per token (higher = cheaper)")
    ax.set_xlabel("kind of text")
    ax.set_title("The same tokenizer is much more efficient on some texts than on others")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_vocab_tradeoff(vocab_sizes: list[int], bytes_per_token: list[float], d_model: int):
    """Bytes per token (shorter sequences) and embedding parameters (a bigger table) vs vocab size."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(vocab_sizes, bytes_per_token, "o-", color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_xticks(vocab_sizes, [str(v) for v in vocab_sizes])
    ax.set_xlabel("vocabulary size (log scale)")
    ax.set_ylabel("bytes per token on held-out text", color="tab:blue")
    params = ax.twinx()
    params.plot(vocab_sizes, [v * d_model / 1e6 for v in vocab_sizes], "s--", color="tab:red")
    params.set_ylabel(f"embedding parameters, millions (d_model={d_model})", color="tab:red")
    ax.set_title("A bigger vocabulary: fewer tokens per text, but a bigger embedding table")
    fig.tight_layout()
    return fig
