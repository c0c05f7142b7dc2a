"""Notebook 04's pictures: the next-token distribution, each sampling stage, and counted samples.

``llmkit.generation.sampling.stage_probabilities`` computes the distribution after every stage; the plots
here draw it (titled, axes labelled), ``next_token_explorer`` redraws the distribution for any
prompt typed into a text box, and ``sampling_explorer`` redraws the stages when a temperature,
top-k, top-p or min-p slider moves. ``survivors`` returns plain data, testable
without a display.
"""
from __future__ import annotations

import base64
import functools
import html
import io
from collections import Counter

import torch

from llmkit.generation.generate import next_token_logits
from llmkit.generation.sampling import SamplingParams, stage_probabilities
from llmkit.model.transformer import Transformer
from llmkit.viz.attention import plot_next_tokens, top_next_tokens
from llmkit.viz.first_taste import show_piece
from llmkit.viz.limitations import StaticHtmlFallback

#: The stages the widget shows; the repetition penalty has no slider (it needs a history).
SHOWN_STAGES = ("model", "temperature", "top-k", "top-p", "min-p")


def token_text(tokenizer, token: int) -> str:
    """A token as readable text: spaces as '␣', newlines as '↵'."""
    return show_piece(tokenizer.token_bytes(int(token)))


def survivors(probs: torch.Tensor, tokenizer) -> list[tuple[str, float]]:
    """The tokens with probability above 0, most likely first, as (readable text, probability)."""
    kept = (probs > 0).nonzero().flatten()
    order = probs[kept].argsort(descending=True)
    return [(token_text(tokenizer, i), float(probs[i])) for i in kept[order]]


def plot_stages(stages: dict[str, torch.Tensor], tokenizer, k: int = 12, title: str = "Sampling, stage by stage"):
    """One panel per stage: the probabilities of the model's ``k`` most likely tokens after it.

    The same tokens appear in every panel, so a filter shows as a bar that vanishes and
    renormalising as the remaining bars growing."""
    import matplotlib.pyplot as plt

    shown = [name for name in SHOWN_STAGES if name in stages]
    top = stages["model"].topk(k).indices
    labels = [repr(token_text(tokenizer, i)) for i in top]
    fig, axes = plt.subplots(1, len(shown), figsize=(2.4 * len(shown) + 1.5, 0.3 * k + 1.6), sharey=True)
    ceiling = max(float(stages[name][top].max()) for name in shown) * 1.15
    for ax, name in zip(axes, shown):
        probs = stages[name][top].tolist()
        alive = int((stages[name] > 0).sum())
        ax.barh(range(k), probs, color=["tab:blue" if p > 0 else "lightgrey" for p in probs])
        ax.set_xlim(0, ceiling)
        ax.set_title(f"{name}\n{alive:,} token{'s' if alive != 1 else ''} left", fontsize=9)
        ax.set_xlabel("probability")
        ax.tick_params(axis="x", labelsize=7)
    axes[0].set_yticks(range(k), labels)
    axes[0].invert_yaxis()  # most likely at the top
    axes[0].set_ylabel("next token (model's top ones)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def survivors_html(probs: torch.Tensor, tokenizer, limit: int = 15) -> str:
    """The tokens a draw can still pick, with their final probabilities."""
    kept = survivors(probs, tokenizer)
    shown = ", ".join(f"<code>{html.escape(repr(text))}</code> {p:.3f}" for text, p in kept[:limit])
    more = f", … and {len(kept) - limit:,} more" if len(kept) > limit else ""
    return f"<p><b>{len(kept):,}</b> token{'s' if len(kept) != 1 else ''} can be drawn: {shown}{more}</p>"


def sampling_explorer(logits: torch.Tensor, tokenizer, prompt: str = "", *, temperature: float = 1.0,
                      top_k: int = 20, top_p: float = 0.9, min_p: float = 0.05):
    """Sliders for temperature, top-k (0 = off), top-p and min-p above the distribution after each
    stage and the list of tokens that survive them all, redrawn whenever a slider moves.

    The picture is a PNG in an ``Image`` widget, so the widget works the same in JupyterLab, on
    Binder and in tests without a browser."""
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    style = {"description_width": "90px"}
    sliders = [
        widgets.FloatSlider(value=temperature, min=0.0, max=2.0, step=0.05, description="temperature",
                            style=style, continuous_update=False),
        widgets.IntSlider(value=top_k, min=0, max=50, description="top-k (0=off)", style=style,
                          continuous_update=False),
        widgets.FloatSlider(value=top_p, min=0.05, max=1.0, step=0.05, description="top-p", style=style,
                            continuous_update=False),
        widgets.FloatSlider(value=min_p, min=0.0, max=0.5, step=0.01, description="min-p", style=style,
                            continuous_update=False),
    ]
    picture = widgets.Image(format="png")
    caption = widgets.HTML()
    title = f"After {prompt.splitlines()[-1]!r}" if prompt.strip() else "Sampling, stage by stage"

    def redraw(_change=None) -> None:
        t, k, p, m = (s.value for s in sliders)
        params = SamplingParams(temperature=t, top_k=k or None, top_p=p, min_p=m)
        stages = stage_probabilities(logits, params)
        picture.value = png_bytes(plot_stages(stages, tokenizer, title=f"{title}: T={t:.2f}, top-k={k or 'off'}, "
                                                                     f"top-p={p:.2f}, min-p={m:.2f}"))
        caption.value = survivors_html(stages["min-p"], tokenizer)

    for slider in sliders:
        slider.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox(sliders[:2]), widgets.HBox(sliders[2:]), picture, caption])


def next_token_explorer(model: Transformer, tokenizer, prompt: str, k: int = 10):
    """A text box above the model's ``k`` most likely next tokens for whatever prompt it holds;
    press Enter to redraw.

    The picture is a PNG in an ``Image`` widget, so the widget works the same in JupyterLab, on
    Binder and in tests without a browser; a stored notebook (GitHub, nbviewer) shows the picture
    for the starting prompt in its place."""
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    explorer = _next_token_explorer_class()(
        [widgets.Text(value=prompt, description="Prompt:", continuous_update=False,
                      layout=widgets.Layout(width="70%")),
         widgets.Image(format="png"), widgets.HTML()])
    explorer.model, explorer.tokenizer, explorer.k = model, tokenizer, k
    explorer.children[0].observe(explorer.redraw, names="value")
    explorer.redraw()
    return explorer


@functools.cache
def _next_token_explorer_class():
    """The widget class, made on first use so that importing this module never needs ipywidgets."""
    import ipywidgets as widgets

    class NextTokenExplorer(StaticHtmlFallback, widgets.VBox):
        """See ``next_token_explorer``; its children are the text box, the picture and a caption."""

        def redraw(self, _change=None) -> None:
            box, picture, caption = self.children
            try:
                logits = next_token_logits(self.model, self.tokenizer.encode(box.value, disallowed_special=()))
            except ValueError as error:  # empty or too long: say so instead of raising
                picture.value, caption.value = b"", f"<p>{html.escape(str(error))}</p>"
                return
            top = top_next_tokens(logits, self.tokenizer, self.k)
            last_line = box.value.splitlines()[-1] if box.value.strip() else box.value
            picture.value = png_bytes(plot_next_tokens(top, f"Next token after {last_line!r}"))
            caption.value = (f"<p>The top {self.k} of {logits.numel():,} tokens hold "
                             f"{sum(p for _, p in top):.0%} of the probability.</p>")

        def static_html(self) -> str:
            box, picture, caption = self.children
            image = (f'<img src="data:image/png;base64,{base64.b64encode(picture.value).decode()}"/>'
                     if picture.value else "")
            return (f"<p>Prompt: <code>{html.escape(repr(box.value))}</code> (open the notebook in Jupyter "
                    f"to type your own)</p>{image}{caption.value}")

    return NextTokenExplorer


def plot_counts(counts: Counter, title: str, xlabel: str = "answer"):
    """Bars of how often each answer came up, most common first."""
    import matplotlib.pyplot as plt

    items = counts.most_common()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(items) + 2), 3))
    ax.bar(range(len(items)), [n for _, n in items], color="tab:blue")
    ax.set_xticks(range(len(items)), [repr(answer) for answer, _ in items], rotation=30, ha="right")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("times drawn")
    ax.set_title(title)
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes for an ``Image`` widget; the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)  # drawn into the widget only, not a second time below the cell
    return buffer.getvalue()


def picture_slider(count: int, draw, describe, *, start: int = 1, description: str = "step"):
    """A slider over steps ``1..count`` with a line of HTML and a picture, redrawn on every move.

    ``describe(step) -> str`` gives the HTML and ``draw(step) -> Figure`` the picture; the notebooks'
    steppers (a generation, a conversation, a trace) differ only in those two functions.
    """
    import ipywidgets as widgets  # imported here so `import llmkit` never needs ipywidgets

    slider = widgets.IntSlider(value=min(max(start, 1), count), min=1, max=count, description=description,
                               continuous_update=False)
    text = widgets.HTML()
    picture = widgets.Image(format="png")

    def redraw(_change=None) -> None:
        text.value = describe(slider.value)
        picture.value = png_bytes(draw(slider.value))

    slider.observe(redraw, names="value")
    redraw()
    return widgets.VBox([slider, text, picture])
