"""Notebook 05's pictures: the loop step by step, where its time goes, and what caching saves.

``generation_stepper`` replays one real ``llmkit.generation.generate`` run a step at a time (context ->
distribution -> chosen token appended). The plots draw what ``llmkit.course.profiling`` measured; each
has a title and labelled axes. ``step_view`` returns plain data, testable without a display.
"""
from __future__ import annotations

import functools
import html
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llmkit.generation.generate import generate
from llmkit.model.transformer import Transformer
from llmkit.course.profiling import ContextCost, ReadCost, Turn, median_time_to_first_token
from llmkit.generation.sampling import SamplingParams, process_logits
from llmkit.viz.sampling import picture_slider, token_text


@dataclass
class Step:
    """One step of the loop: what the model read, what it could pick, and what was picked."""

    step: int  # 1 = the first new token
    context: list[str]  # the tokens read so far (prompt + earlier picks), as readable text
    prompt_length: int
    candidates: list[tuple[str, float]]  # the most likely tokens of the distribution drawn from
    chosen: str
    chosen_probability: float


def step_view(tokenizer, prompt_ids: Sequence[int], tokens: Sequence[int], logits: torch.Tensor,
              sampling: SamplingParams, step: int, k: int = 8) -> Step:
    """Step ``step`` (1-based) of a generation that kept its logits (``keep_logits=True``)."""
    if not 1 <= step <= len(tokens):
        raise ValueError(f"step must be between 1 and {len(tokens)}, got {step}")
    read = list(prompt_ids) + list(tokens[:step - 1])
    probs = process_logits(logits[step - 1], sampling, read).softmax(-1)
    top = probs.topk(k)
    chosen = tokens[step - 1]
    return Step(step, [token_text(tokenizer, t) for t in read], len(prompt_ids),
                [(token_text(tokenizer, i), float(p)) for p, i in zip(top.values, top.indices)],
                token_text(tokenizer, chosen), float(probs[chosen]))


def step_html(view: Step) -> str:
    """The context as chips (prompt grey, generated green), then the chosen token in orange."""
    def chip(text: str, colour: str) -> str:
        return (f'<span style="display:inline-block;margin:1px;padding:0 3px;border-radius:3px;'
                f'background:{colour};color:#000"><code style="color:inherit;background:none">'
                f"{html.escape(text)}</code></span>")

    chips = [chip(t, "#e9ecef" if i < view.prompt_length else "#d4edda") for i, t in enumerate(view.context)]
    chips.append(chip(view.chosen, "#ffc107"))
    return (f'<div style="line-height:1.9"><p>Step <b>{view.step}</b>: the model reads '
            f"<b>{len(view.context)}</b> tokens (grey: prompt, green: written so far) and draws "
            f"<code>{html.escape(repr(view.chosen))}</code> (probability {view.chosen_probability:.3f}), "
            f"which is appended (orange).</p><div>{''.join(chips)}</div></div>")


def plot_step(view: Step):
    """Bars of the step's most likely tokens; the chosen one in orange."""
    import matplotlib.pyplot as plt

    labels, probs = [repr(t) for t, _ in view.candidates], [p for _, p in view.candidates]
    colours = ["tab:orange" if t == view.chosen else "tab:blue" for t, _ in view.candidates]
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(labels) + 1.4))
    ax.barh(range(len(labels)), probs, color=colours)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(probs) * 1.15)
    ax.set_xlabel("probability (after sampling settings)")
    ax.set_ylabel("next token")
    ax.set_title(f"Step {view.step}: drew {view.chosen!r}")
    fig.tight_layout()
    return fig


def generation_stepper(model: Transformer, tokenizer, prompt: str, *, max_new_tokens: int = 20,
                       sampling: SamplingParams | None = None, seed: int = 0, step: int = 1):
    """A step slider over one real generation: the context, the distribution, the chosen token.

    The generation runs once (``keep_logits=True``); moving the slider replays its steps."""
    sampling = sampling or SamplingParams(temperature=0.8)
    prompt_ids = tokenizer.encode(prompt)
    result = generate(model, prompt_ids, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed,
                      keep_logits=True)

    @functools.cache  # describe and draw both need the step's view
    def view(step: int):
        return step_view(tokenizer, prompt_ids, result.tokens, result.logits, sampling, step)

    return picture_slider(len(result.tokens), lambda step: plot_step(view(step)), lambda step: step_html(view(step)),
                          start=step)


def plot_stream(elapsed: Sequence[float], title: str = "Streaming: when each token arrived"):
    """Each token's arrival time: a wait for the first (the prefill), then a steady beat."""
    import matplotlib.pyplot as plt

    ms = [1000 * t for t in elapsed]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.step(ms, range(1, len(ms) + 1), where="post", color="tab:blue")
    ax.plot(ms[:1], [1], "o", color="tab:orange", label="first token (time to first token)")
    ax.set_xlim(left=0)  # the gap before the first token is the prefill
    ax.set_xlabel("time since the request (ms)")
    ax.set_ylabel("tokens received")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def plot_token_times(with_cache: Sequence[float], without_cache: Sequence[float], prompt_tokens: int,
                     title: str = "Time per new token as the text grows"):
    """Each decode step's time, with and without the KV cache, against the length of the text."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for times, label, colour in ((without_cache, "without KV cache (recompute everything)", "tab:red"),
                                 (with_cache, "with KV cache (one new token)", "tab:blue")):
        steps = times[1:]  # the first entry is the prefill
        lengths = range(prompt_tokens + 1, prompt_tokens + 1 + len(steps))
        ax.plot(lengths, [1000 * t for t in steps], ".", markersize=3, color=colour, label=label)
    ax.set_xlabel("tokens in the context")
    ax.set_ylabel("ms per new token")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_context_costs(costs: Sequence[ContextCost], title: str = "Longer prompts: more time and more memory"):
    """Prefill time (measured) and KV-cache memory against prompt length, side by side."""
    import matplotlib.pyplot as plt

    tokens = [c.tokens for c in costs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(tokens, [1000 * c.prefill_s for c in costs], "o-", color="tab:blue")
    left.set_xlabel("prompt tokens")
    left.set_ylabel("prefill time (ms)")
    left.set_ylim(bottom=0)
    left.set_title("Reading the prompt")
    right.plot(tokens, [c.kv_cache_bytes / 2**20 for c in costs], "o-", color="tab:green")
    right.set_xlabel("prompt tokens")
    right.set_ylabel("KV cache (MiB)")
    right.set_ylim(bottom=0)
    right.set_title("Keeping its keys and values")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_prompt_caching(cached_runs: Sequence[Sequence[Turn]], uncached_runs: Sequence[Sequence[Turn]],
                        title: str = "Prompt caching over a conversation"):
    """Left: each turn's prompt split into tokens read from the prefix cache and tokens recomputed.
    Right: time to first token per turn (the median over the runs), with and without the prefix cache."""
    import matplotlib.pyplot as plt

    cached, cached_times = cached_runs[0], median_time_to_first_token(cached_runs)
    uncached_times = median_time_to_first_token(uncached_runs)
    turns = [t.turn for t in cached]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    cached_tokens = [t.usage.cache_read_input_tokens for t in cached]
    left.bar(turns, cached_tokens, color="tab:green", label="read from the prefix cache")
    left.bar(turns, [t.usage.input_tokens for t in cached], bottom=cached_tokens,
             color="tab:red", label="recomputed (prefill)")
    left.set_xlabel("turn")
    left.set_ylabel("prompt tokens")
    left.set_xticks(turns)
    left.set_title("Each turn re-sends the whole history")
    left.legend(loc="upper left", fontsize=8)
    right.plot(turns, [1000 * t for t in uncached_times], "o-", color="tab:red",
               label="no prefix cache")
    right.plot(turns, [1000 * t for t in cached_times], "o-", color="tab:green",
               label="with the prefix cache")
    right.set_xlabel("turn")
    right.set_ylabel("time to first token (ms)")
    right.set_ylim(bottom=0)
    right.set_xticks(turns)
    right.set_title("Waiting for the first token")
    right.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_read_costs(costs: Sequence[ReadCost], title: str = "What prompt caching cannot remove"):
    """Time to first token against the number of prompt tokens the model had to read, the rest
    coming from the prefix cache. Where the line starts is the fixed cost of one forward pass;
    the dashed line is the whole prompt read with no cache (a cost with ``cached_tokens == 0``)."""
    import matplotlib.pyplot as plt

    costs = sorted(costs, key=lambda c: c.read_tokens)
    partial = [c for c in costs if c.cached_tokens > 0]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.plot([c.read_tokens for c in partial], [1000 * c.time_to_first_token for c in partial], "o-",
            color="tab:green", label="the rest from the prefix cache")
    for whole in (c for c in costs if c.cached_tokens == 0):
        ax.axhline(1000 * whole.time_to_first_token, color="tab:red", linestyle="--",
                   label=f"no cache: all {whole.read_tokens} tokens read")
    ax.set_xscale("log", base=2)
    ax.set_xticks([c.read_tokens for c in costs], [str(c.read_tokens) for c in costs])
    ax.set_xlabel("prompt tokens the model reads (log scale)")
    ax.set_ylabel("time to first token (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(loc="center left", fontsize=8)
    fig.tight_layout()
    return fig
