"""Notebook 03's pictures: attention patterns, the residual stream, ablation, the logit lens, the next token.

``look_inside`` runs one sentence through the model under ``llmkit.model.inspect.capture`` and keeps
everything the pictures need; the plot functions draw it (titled, axes labelled) and
``attention_explorer`` is the widget that redraws a head's pattern when you change the text,
the layer or the head.
"""
from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from llmkit.model.inspect import Ablation, capture
from llmkit.model.transformer import Transformer
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.viz.first_taste import show_piece

DEFAULT_TEXT = "When will it rain in Mumbai?"


@dataclass
class Look:
    """One sentence seen from inside the model (batch of one, detached, on the CPU)."""

    ids: list[int]
    labels: list[str]  # each token as readable text ('␣' for a space)
    attention: torch.Tensor  # (layers, heads, query, key); each row sums to 1
    residual: torch.Tensor  # (layers + 1, time, d_model): the embeddings, then after each layer
    logits: torch.Tensor  # (time, vocab): the model's own output
    lens: torch.Tensor  # (layers, time, vocab): the logit lens, each layer read through the LM head


def look_inside(model: Transformer, tokenizer: Tokenizer, text: str) -> Look:
    """Run ``text`` through ``model`` once and record attention, residual stream and logit lens."""
    ids = tokenizer.encode(text, disallowed_special=())
    if not ids:
        raise ValueError("the text is empty: type at least one character")
    with torch.no_grad(), capture(model) as trace:
        logits = model(torch.tensor([ids], device=model.device))
    return Look(
        ids=ids,
        labels=token_labels(tokenizer, ids),
        attention=torch.stack(trace.attention)[:, 0].float().cpu(),
        residual=torch.stack([trace.embedding, *trace.residual])[:, 0].float().cpu(),
        logits=logits[0].float().cpu(),
        lens=trace.logit_lens()[:, 0].float().cpu(),
    )


def token_labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token as readable text: spaces as '␣', newlines as '↵'."""
    return [show_piece(tokenizer.token_bytes(i)) for i in ids]


# ---------------------------------------------------------------- attention
def plot_causal_mask(labels: Sequence[str]):
    """Which key each query may look at: itself and everything before it, never the future."""
    import matplotlib.pyplot as plt

    n = len(labels)
    allowed = np.tril(np.ones((n, n)))
    fig, ax = plt.subplots(figsize=(0.4 * n + 2.5, 0.4 * n + 1.8))
    ax.imshow(allowed, cmap="Greens", vmin=0, vmax=1.3)
    _token_axes(ax, labels)
    ax.set_title("Causal mask: green = may attend")
    fig.tight_layout()
    return fig


def plot_attention(pattern: torch.Tensor, labels: Sequence[str], title: str, annotate: bool | None = None):
    """One head's attention pattern (query rows, key columns) as a heatmap with token labels.
    Weights are written in the cells when the sentence is short enough to read them."""
    import matplotlib.pyplot as plt

    weights = pattern.detach().float().numpy()
    n = len(labels)
    fig, ax = plt.subplots(figsize=(0.45 * n + 3, 0.45 * n + 2))
    image = ax.imshow(weights, cmap="Blues", vmin=0, vmax=1)
    if annotate is None:
        annotate = n <= 14
    if annotate:
        for i in range(n):
            for j in range(i + 1):
                ax.text(j, i, f"{weights[i, j]:.2f}".lstrip("0"), ha="center", va="center", fontsize=7,
                        color="white" if weights[i, j] > 0.6 else "black")
    _token_axes(ax, labels)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="attention weight", fraction=0.046)
    fig.tight_layout()
    return fig


def _token_axes(ax, labels: Sequence[str]) -> None:
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("key: the token looked at")
    ax.set_ylabel("query: the token looking")


def strongest_links(pattern: torch.Tensor, labels: Sequence[str]) -> list[tuple[str, str, float]]:
    """For every query after the first, the earlier token it attends to most: (query, key, weight)."""
    links = []
    for query in range(1, len(labels)):
        weight, key = pattern[query, : query + 1].max(dim=0)
        links.append((labels[query], labels[int(key)], float(weight)))
    return links


def previous_token_scores(attention: torch.Tensor) -> torch.Tensor:
    """For each (layer, head), the average weight a token puts on the token right before it:
    near 1 for a "previous-token head", which tells each position what came just before."""
    if attention.size(-1) < 2:
        raise ValueError("need at least two tokens to measure attention to the previous one")
    return attention.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def format_head_table(values: torch.Tensor, title: str) -> str:
    """A (layers, heads) tensor as a small text table, rounded to 2 decimals."""
    n_heads = values.size(1)
    lines = [title, "         " + "".join(f"  head {h}" for h in range(n_heads))]
    lines += [f"layer {layer}: " + "".join(f"{float(v):8.2f}" for v in row) for layer, row in enumerate(values)]
    return "\n".join(lines)


def plot_head_scores(scores: torch.Tensor, title: str, label: str):
    """A (layers, heads) grid of one number per head, written in the cells."""
    import matplotlib.pyplot as plt

    values = scores.detach().float().numpy()
    fig, ax = plt.subplots(figsize=(0.8 * values.shape[1] + 2.5, 0.6 * values.shape[0] + 1.5))
    image = ax.imshow(values, cmap="Purples", vmin=0, vmax=1)
    for (layer, head), value in np.ndenumerate(values):
        ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=8,
                color="white" if value > 0.6 else "black")
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=label)
    fig.tight_layout()
    return fig


def attention_explorer(model: Transformer, tokenizer: Tokenizer, text: str = DEFAULT_TEXT,
                       layer: int = 0, head: int = 0):
    """A text box and layer/head pickers above one head's attention pattern, redrawn on every change.

    The picture is a PNG in an ``Image`` widget and the caption lists each token's strongest link,
    so the widget works the same in JupyterLab, on Binder and in tests without a browser."""
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    config = model.config
    box = widgets.Text(value=text, description="Text:", continuous_update=False,
                       layout=widgets.Layout(width="60%"))
    layer_pick = widgets.Dropdown(options=list(range(config.n_layers)), value=layer, description="Layer:")
    head_pick = widgets.Dropdown(options=list(range(config.n_heads)), value=head, description="Head:")
    picture = widgets.Image(format="png")
    caption = widgets.HTML()
    seen: dict[str, Look] = {}  # the last sentence's Look: changing only the head needs no new forward pass

    def redraw(_change=None) -> None:
        try:
            if box.value not in seen:
                seen.clear()
                seen[box.value] = look_inside(model, tokenizer, box.value)
        except ValueError as error:  # empty or too long: say so instead of raising
            picture.value, caption.value = b"", f"<p>{html.escape(str(error))}</p>"
            return
        looked = seen[box.value]
        pattern = looked.attention[layer_pick.value, head_pick.value]
        picture.value = _png(plot_attention(pattern, looked.labels,
                                            f"Layer {layer_pick.value}, head {head_pick.value}"))
        caption.value = _links_html(strongest_links(pattern, looked.labels))

    for control in (box, layer_pick, head_pick):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([box, widgets.HBox([layer_pick, head_pick]), picture, caption])


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)  # drawn into the widget only, not a second time below the cell
    return buffer.getvalue()


def _links_html(links: list[tuple[str, str, float]]) -> str:
    items = ", ".join(f"<code>{html.escape(q)}</code>&rarr;<code>{html.escape(k)}</code> {w:.2f}"
                      for q, k, w in links)
    return f"<p><b>Strongest link of each token</b> (query &rarr; key, weight): {items}</p>"


# ---------------------------------------------------------------- the residual stream
def plot_residual_norms(residual: torch.Tensor, labels: Sequence[str]):
    """Length (L2 norm) of the residual-stream vector at every position, after every layer."""
    import matplotlib.pyplot as plt

    norms = residual.detach().float().norm(dim=-1).numpy()  # (layers + 1, time)
    names = ["embedding"] + [f"after layer {i}" for i in range(norms.shape[0] - 1)]
    fig, (grid, lines) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1.6, 1]})
    image = grid.imshow(norms, cmap="magma", aspect="auto")
    grid.set_xticks(range(len(labels)), labels, rotation=90)
    grid.set_yticks(range(len(names)), names)
    grid.set_xlabel("token")
    grid.set_ylabel("where in the model")
    grid.set_title("Residual stream: vector length per layer and position")
    fig.colorbar(image, ax=grid, label="L2 norm")
    lines.plot(range(len(names)), norms, color="grey", alpha=0.5, linewidth=1)
    lines.plot(range(len(names)), norms.mean(axis=1), color="black", linewidth=2.5, label="mean over tokens")
    lines.set_xticks(range(len(names)), ["emb"] + [str(i) for i in range(len(names) - 1)])
    lines.set_xlabel("embedding, then after layer ...")
    lines.set_ylabel("L2 norm")
    lines.set_title("Each layer adds to the stream")
    lines.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_ablation(effects: Ablation, score_name: str = "held-out loss (nats per token)"):
    """Side-by-side bars per layer: how much the score rises when that layer's attention, or its
    MLP, stops adding to the residual stream. A tall bar is a part the model cannot do without."""
    import matplotlib.pyplot as plt

    layers = np.arange(len(effects.attention))
    fig, ax = plt.subplots(figsize=(1.1 * len(layers) + 3.5, 3.8))
    for offset, part, label, colour in ((-0.2, "attention", "attention removed", "tab:blue"),
                                        (0.2, "mlp", "MLP (feed-forward) removed", "tab:orange")):
        rises = effects.increase(part)
        bars = ax.bar(layers + offset, rises, width=0.4, label=label, color=colour)
        ax.bar_label(bars, [f"{rise:+.2f}" for rise in rises], fontsize=8, padding=2)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(layers, [f"layer {i}" for i in layers])
    ax.set_xlabel("the layer whose part is removed (one at a time)")
    ax.set_ylabel(f"rise in {score_name.split(' (')[0]}")
    ax.set_title(f"What each part is worth: {score_name} {effects.baseline:.2f} with every part")
    ax.margins(y=0.15)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def neuron_contexts_text(tokenizer: Tokenizer, ids: torch.Tensor, activations: torch.Tensor, neuron: int,
                         k: int = 8, context: int = 8) -> str:
    """The ``k`` positions where ``neuron`` fires most, each with the ``context`` tokens before it.

    ``ids`` (batch, time) is the text that was run, ``activations`` (batch, time, d_ff) the neuron
    values from ``llmkit.model.inspect.mlp_neurons``; the token at the position is in [brackets]."""
    values = activations[..., neuron]
    top = values.flatten().topk(k)
    lines = [f"neuron {neuron}: its {k} strongest positions (value, the text before, [the token there])"]
    for value, flat in zip(top.values.tolist(), top.indices.tolist()):
        row, position = divmod(flat, values.size(1))
        before = tokenizer.decode(ids[row, max(0, position - context):position].tolist())
        token = show_piece(tokenizer.token_bytes(int(ids[row, position])))
        lines.append(f"  {value:6.2f}  {before[-40:]!r:>44} [{token}]")
    return "\n".join(lines)


# ---------------------------------------------------------------- the logit lens and the next token
def logit_lens_text(looked: Look, tokenizer: Tokenizer, position: int = -1, k: int = 3) -> str:
    """What each layer would predict after token ``position``: top ``k`` tokens and probabilities."""
    lines = [f"next-token guesses after {looked.labels[position]!r}:"]
    rows = [(f"after layer {i}", looked.lens[i, position]) for i in range(looked.lens.size(0))]
    rows.append(("model output", looked.logits[position]))
    for name, logits in rows:
        top = logits.softmax(dim=-1).topk(k)
        shown = "  ".join(f"{show_piece(tokenizer.token_bytes(int(i)))!r} {float(p):.2f}"
                          for p, i in zip(top.values, top.indices))
        lines.append(f"  {name:>13}: {shown}")
    return "\n".join(lines)


def plot_logit_lens(looked: Look, tokenizer: Tokenizer):
    """For every layer and position, the token that layer would predict next (written in the
    cell) and its probability (the colour). The last row is the model's actual prediction."""
    import matplotlib.pyplot as plt

    probs = looked.lens.softmax(dim=-1)
    best_p, best_id = probs.max(dim=-1)  # (layers, time)
    n_layers, n = best_p.shape
    fig, ax = plt.subplots(figsize=(0.6 * n + 3, 0.5 * n_layers + 2.2))
    image = ax.imshow(best_p.numpy(), cmap="YlGn", vmin=0, vmax=1, aspect="auto")
    for (layer, position), token_id in np.ndenumerate(best_id.numpy()):
        ax.text(position, layer, show_piece(tokenizer.token_bytes(int(token_id))), ha="center",
                va="center", fontsize=7)
    ax.set_xticks(range(n), looked.labels, rotation=90)
    ax.set_yticks(range(n_layers), [f"after layer {i}" for i in range(n_layers)])
    ax.set_xlabel("input token (the guess is for the token after it)")
    ax.set_ylabel("read out after")
    ax.set_title("Logit lens: each layer's best guess for the next token")
    fig.colorbar(image, ax=ax, label="probability of that guess")
    fig.tight_layout()
    return fig


def top_next_tokens(logits: torch.Tensor, tokenizer: Tokenizer, k: int = 10) -> list[tuple[str, float]]:
    """The ``k`` most likely next tokens as (readable text, probability), most likely first."""
    top = logits.float().softmax(dim=-1).topk(k)
    return [(show_piece(tokenizer.token_bytes(int(i))), float(p)) for p, i in zip(top.values, top.indices)]


def plot_next_tokens(top: list[tuple[str, float]], title: str):
    """Horizontal bars of the most likely next tokens."""
    import matplotlib.pyplot as plt

    labels, probs = [repr(t) for t, _ in top], [p for _, p in top]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(top) + 1.5))
    ax.barh(range(len(top)), probs, color="tab:blue")
    ax.set_yticks(range(len(top)), labels)
    ax.invert_yaxis()  # most likely at the top
    for y, p in enumerate(probs):
        ax.text(p, y, f" {p:.1%}", va="center", fontsize=8)
    ax.set_xlabel("probability")
    ax.set_ylabel("next token")
    ax.set_title(title)
    ax.set_xlim(0, max(probs) * 1.2)
    fig.tight_layout()
    return fig
