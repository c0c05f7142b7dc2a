"""Notebook 02's pictures: token vectors, their neighbours, a 2-D map, positions, image patches.

The numbers come from ``llmkit.model.embeddings`` and the model; these functions only format and draw
them. Each plot returns its matplotlib figure (titled, axes labelled); the widget returns an
ipywidgets box whose contents are redrawn when the text box changes.
"""
from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import torch

from llmkit.model.embeddings import nearest_neighbours, word_token_ids
from llmkit.model.transformer import rope_tables
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.tokens.words import word_token
from llmkit.viz.first_taste import show_piece

DEFAULT_WORD = " king"


def token_text(tokenizer: Tokenizer, token_id: int) -> str:
    """A token as readable text: spaces as '␣', newlines as '↵'."""
    return show_piece(tokenizer.token_bytes(token_id))


# ---------------------------------------------------------------- neighbours
def neighbours_text(table: torch.Tensor, tokenizer: Tokenizer, words: Sequence[str], k: int = 6,
                    candidates: Sequence[int] | None = None) -> str:
    """One line per word: its nearest neighbours in ``table`` with their cosine similarity
    (rounded to 2 decimals, so the printout is the same on every machine)."""
    candidates = word_token_ids(tokenizer) if candidates is None else candidates
    lines = []
    for word in words:
        token_id = word_token(tokenizer, word)
        near = nearest_neighbours(table, token_id, k=k, candidates=candidates)
        shown = ", ".join(f"{token_text(tokenizer, i)} {s:.2f}" for i, s in near)
        lines.append(f"{token_text(tokenizer, token_id):>10} -> {shown}")
    return "\n".join(lines)


def neighbours_html(table: torch.Tensor, tokenizer: Tokenizer, word: str, k: int = 8,
                    candidates: Sequence[int] | None = None) -> str:
    """The neighbour list of one word as a small HTML table, or a note if the word is not one token."""
    try:
        token_id = word_token(tokenizer, word)
    except ValueError as error:
        return f"<p>{html.escape(str(error))}</p>"
    candidates = word_token_ids(tokenizer) if candidates is None else candidates
    rows = "".join(f"<tr><td><code>{html.escape(token_text(tokenizer, i))}</code></td><td>{s:.2f}</td></tr>"
                   for i, s in nearest_neighbours(table, token_id, k=k, candidates=candidates))
    return (f"<p>token <code>{html.escape(token_text(tokenizer, token_id))}</code> (id {token_id}): "
            f"nearest whole-word tokens</p><table><tr><th>token</th><th>cosine</th></tr>{rows}</table>")


def neighbours_explorer(table: torch.Tensor, tokenizer: Tokenizer, word: str = DEFAULT_WORD):
    """A text box for a word and, below it, its nearest neighbours in ``table``, redrawn as you type."""
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    candidates = word_token_ids(tokenizer)
    box = widgets.Text(value=word, description="Word:", continuous_update=True)
    view = widgets.HTML(neighbours_html(table, tokenizer, word, candidates=candidates))

    def redraw(change) -> None:
        view.value = neighbours_html(table, tokenizer, change["new"], candidates=candidates)

    box.observe(redraw, names="value")
    return widgets.VBox([box, view])


# ---------------------------------------------------------------- vectors and the 2-D map
def plot_vectors(table: torch.Tensor, ids: Sequence[int], labels: Sequence[str], n_dims: int = 64):
    """The first ``n_dims`` numbers of some rows of the table, as coloured cells: each token's
    vector is just a row of numbers."""
    import matplotlib.pyplot as plt

    rows = table[list(ids), :n_dims].detach().float().numpy()
    limit = float(np.abs(rows).max()) or 1.0
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(ids) + 1.4))
    image = ax.imshow(rows, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_yticks(range(len(ids)), labels)
    ax.set_xlabel(f"dimension (the first {n_dims} of {table.size(1)})")
    ax.set_ylabel("token")
    ax.set_title("Each token id picks one row of the embedding table")
    fig.colorbar(image, ax=ax, label="value")
    fig.tight_layout()
    return fig


def plot_word_map(points: torch.Tensor, labels: Sequence[str], groups: Sequence[str],
                  explained: torch.Tensor | None = None):
    """A 2-D projection of token vectors: one labelled dot per token, coloured by group."""
    import matplotlib.pyplot as plt

    xy = points.detach().float().numpy()
    fig, ax = plt.subplots(figsize=(10, 7))
    colours = {group: plt.cm.tab10(n % 10) for n, group in enumerate(dict.fromkeys(groups))}  # first-seen order
    for group, colour in colours.items():
        members = [i for i, g in enumerate(groups) if g == group]
        ax.scatter(xy[members, 0], xy[members, 1], color=colour, label=group, s=25)
    share = ("" if explained is None else
             f" ({float(explained[0]):.0%} and {float(explained[1]):.0%} of the variance)")
    ax.set_xlabel("first principal direction")
    ax.set_ylabel("second principal direction")
    ax.set_title("Token vectors projected to 2-D" + share)
    ax.legend(fontsize=8)
    fig.tight_layout()  # settle the layout first: label placement measures the final positions
    hidden = place_labels(ax, xy, labels, [colours[g] for g in groups])
    if hidden:
        ax.text(0.01, 0.01, f"not labelled (no room): {', '.join(hidden)}", transform=ax.transAxes,
                fontsize=8, color="dimgrey")
    return fig


#: Where a label may go relative to its dot, in points: right, left, above, below, at two distances
#: (a label moved to the outer ring gets a thin line back to its dot).
LABEL_SPOTS = tuple((scale * dx, scale * dy, ha, va) for scale in (1, 3)
                    for dx, dy, ha, va in ((4, 2, "left", "bottom"), (4, -2, "left", "top"),
                                           (-4, 2, "right", "bottom"), (-4, -2, "right", "top"),
                                           (0, 5, "center", "bottom"), (0, -5, "center", "top")))


def place_labels(ax, xy, labels: Sequence[str], colours: Sequence) -> list[str]:
    """Write each label beside its dot at the first spot where it overlaps no other label, stays
    inside the axes, and is nearer its own dot than any other (so it cannot be read as naming a
    neighbour); a label with no such spot is left out. Returns the labels left out.

    Greedy and in order, so the first labels of a crowded cluster win; every dot is still drawn."""
    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    dots = ax.transData.transform(xy)
    taken, hidden = [], []
    for n, (point, label, colour) in enumerate(zip(xy, labels, colours)):
        for dx, dy, ha, va in LABEL_SPOTS:
            far = abs(dx) > 4 or abs(dy) > 5
            text = ax.annotate(label, point, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                               fontsize=8, color=colour,
                               arrowprops=dict(arrowstyle="-", color=colour, lw=0.8) if far else None)
            box = text.get_window_extent(renderer)
            fits = inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
            words = Text.get_window_extent(text, renderer)  # the words alone, without the leader line
            own = _gap(words, dots[n])
            nearest_is_own = all(_gap(words, dot) > own + 3 for m, dot in enumerate(dots) if m != n)
            if fits and nearest_is_own and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                break
            text.remove()
        else:
            hidden.append(label)
    return hidden


def _gap(box, point) -> float:
    """Distance in pixels from ``point`` to the nearest edge of ``box`` (0 when inside it)."""
    x, y = point
    return float(np.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1)))


# ---------------------------------------------------------------- positions
def plot_rope_angles(head_dim: int, n_positions: int = 64, theta: float = 10000.0):
    """RoPE's rotation, drawn: cos(angle) for every position and dimension pair (left), and the
    same for three pairs as curves (right). Early pairs turn fast, late pairs slowly."""
    import matplotlib.pyplot as plt

    cos, sin = rope_tables(head_dim, n_positions, theta)
    n_pairs = head_dim // 2
    degrees = np.degrees(torch.atan2(sin, cos).numpy()) % 360  # each pair's angle, read back from the tables
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    image = left.imshow(cos[:, :n_pairs].numpy().T, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto",
                        interpolation="nearest")
    left.set_xlabel("position in the sequence")
    left.set_ylabel("dimension pair")
    left.set_title("cos(rotation angle) by position and pair")
    fig.colorbar(image, ax=left, label="cos(angle)")
    for pair in (0, n_pairs // 4, n_pairs // 2):
        per_step = degrees[1, pair]
        right.plot(range(n_positions), cos[:, pair].numpy(), ".-", markersize=3,
                   label=f"pair {pair}: {per_step:.2f}° per step, one turn every {360 / per_step:,.0f} positions")
    right.set_xlabel("position in the sequence")
    right.set_ylabel("cos(rotation angle)")
    right.set_title("Each pair turns at its own speed")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_position_scores(rope_grid: torch.Tensor, learned_grid: torch.Tensor):
    """The score of one query and one key placed at every pair of positions, side by side for
    RoPE (stripes: only the offset matters) and a learned position table (no such pattern)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    titles = ("RoPE: the score depends only on the offset", "Added positions (random table): no such pattern")
    for ax, grid, title in zip(axes, (rope_grid, learned_grid), titles):
        image = ax.imshow(grid.detach().float().numpy(), cmap="viridis", interpolation="nearest")
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position i")
        ax.set_title(title)
        fig.colorbar(image, ax=ax, label="score q·k")
    fig.tight_layout()
    return fig


def plot_position_table(table: torch.Tensor, n_positions: int = 64, n_dims: int = 64):
    """A learned position table: one row per position, added to the token vector at that position."""
    import matplotlib.pyplot as plt

    rows = table[:n_positions, :n_dims].detach().float().numpy()
    limit = float(np.abs(rows).max()) or 1.0
    fig, ax = plt.subplots(figsize=(7, 3.8))
    image = ax.imshow(rows.T, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    ax.set_xlabel("position in the sequence")
    ax.set_ylabel(f"dimension (first {n_dims} of {table.size(1)})")
    ax.set_title("A learned position table, before training: random numbers")
    fig.colorbar(image, ax=ax, label="value")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- images
def plot_patches(image: np.ndarray, patches: torch.Tensor, patch: int = 28):
    """The image cut into a grid of numbered patches (left) and the patch vectors as rows (right):
    one row per patch, i.e. per image token, its pixels drawn in the order they are flattened."""
    import matplotlib.pyplot as plt

    height, width = image.shape[:2]
    rows, cols = height // patch, width // patch
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [1, 1.4]})
    left.imshow(image, interpolation="nearest")
    for k in range(1, rows):
        left.axhline(k * patch - 0.5, color="white", linewidth=0.8)
    for k in range(1, cols):
        left.axvline(k * patch - 0.5, color="white", linewidth=0.8)
    for r in range(rows):
        for c in range(cols):
            left.text(c * patch + patch / 2, r * patch + patch / 2, str(r * cols + c), color="white",
                      fontsize=7, ha="center", va="center")
    left.set_xlabel("x (pixels)")
    left.set_ylabel("y (pixels)")
    left.set_title(f"{height}x{width} image -> {rows}x{cols} = {rows * cols} patches of {patch}x{patch}")
    channels = patches.size(1) // (patch * patch)
    strips = patches.detach().float().reshape(len(patches), patch * patch, channels).numpy()
    strips = strips / (255.0 if strips.max() > 1 else 1.0)  # 0..255 pixels drawn like 0..1 ones
    right.imshow(strips if channels == 3 else strips[:, :, 0], cmap="gray", aspect="auto",
                 interpolation="nearest", vmin=0, vmax=1)
    right.set_xlabel(f"the {patch * patch} pixels of a patch in reading order, "
                     f"{channels} number{'s' if channels > 1 else ''} each")
    right.set_ylabel("patch number (one token each)")
    right.set_title(f"Each patch flattened into one row of {patches.size(1):,} numbers")
    fig.tight_layout()
    return fig
