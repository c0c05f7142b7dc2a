"""Notebooks 04 and 05's pictures and widgets, headless: each figure is titled with labelled axes,
and each widget redraws when a control moves. A tiny random model keeps the tests fast; the
tokenizer is the shipped one."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from collections import Counter  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from llmkit.generation.generate import Usage, generate, next_token_logits  # noqa: E402
from llmkit.course.profiling import ContextCost, ReadCost, Turn  # noqa: E402
from llmkit.generation.sampling import SamplingParams, stage_probabilities  # noqa: E402
from llmkit.viz import generation as vg  # noqa: E402
from llmkit.viz import sampling as vs  # noqa: E402
from plot_checks import assert_titled_and_labelled  # noqa: E402


@pytest.fixture(scope="module")
def model(tokenizer, tiny_llama):
    return tiny_llama(tokenizer.vocab_size, context_length=64)


@pytest.fixture(scope="module")
def logits(model, tokenizer):
    return next_token_logits(model, tokenizer.encode("ROMEO.\nGood morrow, my good"))


def test_survivors_are_exactly_the_tokens_left_with_probability(logits, tokenizer):
    stages = stage_probabilities(logits, SamplingParams(top_k=5))
    kept = vs.survivors(stages["min-p"], tokenizer)
    assert len(kept) == 5 and sum(p for _, p in kept) == pytest.approx(1.0)
    assert [p for _, p in kept] == sorted((p for _, p in kept), reverse=True)
    only_top = vs.survivors(stage_probabilities(logits, SamplingParams(min_p=1.0))["min-p"], tokenizer)
    assert len(only_top) == 1 and only_top[0][1] == pytest.approx(1.0)


def test_stage_plot_and_counts_are_titled_and_labelled(logits, tokenizer):
    fig = vs.plot_stages(stage_probabilities(logits, SamplingParams(top_k=3)), tokenizer, k=6)
    assert_titled_and_labelled(fig)
    assert len(fig.axes) == len(vs.SHOWN_STAGES)
    assert "3 tokens left" in fig.axes[2].get_title()  # the top-k panel
    assert_titled_and_labelled(vs.plot_counts(Counter({" lord": 4, " lady": 3, " V": 1}), "Ten answers"))


def test_sampling_explorer_redraws_when_any_slider_moves(logits, tokenizer):
    widget = vs.sampling_explorer(logits, tokenizer, "ROMEO.\nGood morrow, my good")
    (temperature, top_k), (top_p, min_p) = widget.children[0].children, widget.children[1].children
    picture, caption = widget.children[2], widget.children[3]
    assert bytes(picture.value).startswith(b"\x89PNG") and "can be drawn" in caption.value
    seen = {bytes(picture.value)}
    for slider, value in ((temperature, 1.05), (top_k, 3), (top_p, 0.5), (min_p, 0.2)):
        slider.value = value
        assert bytes(picture.value) not in seen, f"moving {slider.description} did not redraw"
        seen.add(bytes(picture.value))
    top_k.value, top_p.value, min_p.value = 3, 1.0, 0.0
    assert "<b>3</b> tokens can be drawn" in caption.value
    temperature.value = 0.0  # greedy: one token left, explained rather than raised
    assert "<b>1</b> token can be drawn" in caption.value


def test_step_view_replays_a_real_generation(model, tokenizer):
    prompt = tokenizer.encode("ROMEO.\n")
    sampling = SamplingParams(temperature=0.8)
    run = generate(model, prompt, max_new_tokens=5, sampling=sampling, seed=0, keep_logits=True)
    for step in range(1, 6):
        view = vg.step_view(tokenizer, prompt, run.tokens, run.logits, sampling, step)
        assert len(view.context) == len(prompt) + step - 1
        assert view.chosen == vs.token_text(tokenizer, run.tokens[step - 1]) and view.chosen_probability > 0
        assert view.candidates[0][1] >= view.candidates[-1][1]
    assert "Step <b>3</b>" in vg.step_html(vg.step_view(tokenizer, prompt, run.tokens, run.logits, sampling, 3))
    with pytest.raises(ValueError, match="between 1 and 5"):
        vg.step_view(tokenizer, prompt, run.tokens, run.logits, sampling, 6)


def test_generation_stepper_redraws_on_every_step(model, tokenizer):
    widget = vg.generation_stepper(model, tokenizer, "ROMEO.\n", max_new_tokens=6)
    slider, text, picture = widget.children
    assert (slider.min, slider.max, slider.value) == (1, 6, 1)
    seen = {(text.value, bytes(picture.value))}
    for step in range(2, 7):
        slider.value = step
        assert (text.value, bytes(picture.value)) not in seen and f"Step <b>{step}</b>" in text.value
        seen.add((text.value, bytes(picture.value)))
    assert_titled_and_labelled(vg.plot_step(vg.step_view(
        tokenizer, tokenizer.encode("A"), [5, 6], torch.randn(2, tokenizer.vocab_size), SamplingParams(), 2)))


def test_timing_plots_are_titled_and_labelled():
    assert_titled_and_labelled(vg.plot_stream([0.05, 0.06, 0.07]))
    assert_titled_and_labelled(vg.plot_token_times([0.01, 0.002, 0.002], [0.01, 0.003, 0.004], prompt_tokens=4))
    assert_titled_and_labelled(vg.plot_context_costs([ContextCost(16, 0.01, 2**17), ContextCost(32, 0.02, 2**18)]))
    cached = [Turn(1, "a", Usage(20, 5, 0, 0.01)), Turn(2, "b", Usage(24, 5, 16, 0.01))]
    plain = [Turn(1, "a", Usage(20, 5, 0, 0.01)), Turn(2, "b", Usage(40, 5, 0, 0.02))]
    slower = [Turn(1, "a", Usage(20, 5, 0, 0.03)), Turn(2, "b", Usage(40, 5, 0, 0.04))]
    fig = vg.plot_prompt_caching([cached], [plain, slower, plain])
    assert_titled_and_labelled(fig)
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    assert heights == [0, 16, 20, 24]  # cached tokens per turn, then recomputed ones stacked on top
    assert list(fig.axes[1].lines[0].get_ydata()) == pytest.approx([10, 20])  # the median run, in ms
    fig = vg.plot_read_costs([ReadCost(64, 0, 0.02), ReadCost(1, 63, 0.004), ReadCost(8, 56, 0.006)])
    assert_titled_and_labelled(fig)
    line, whole = fig.axes[0].lines
    assert list(line.get_xdata()) == [1, 8]  # sorted by tokens read; the uncached prompt is the dashed line
    assert list(whole.get_ydata()) == [20, 20]  # in ms
