"""Notebook 04's next-token widget, headless: it redraws for whatever prompt is typed, says what is
wrong with an empty one instead of raising, and a viewer without widgets sees the starting picture."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import base64  # noqa: E402

from llmkit.generation.generate import next_token_logits  # noqa: E402
from llmkit.viz import sampling as vs  # noqa: E402
from llmkit.viz.attention import top_next_tokens  # noqa: E402
from plot_checks import static_html  # noqa: E402


def test_next_token_explorer_redraws_for_a_typed_prompt(tokenizer, tiny_llama):
    model = tiny_llama(tokenizer.vocab_size)
    widget = vs.next_token_explorer(model, tokenizer, "ROMEO.\nGood morrow, my good", k=5)
    box, picture, caption = widget.children
    first = bytes(picture.value)
    assert first.startswith(b"\x89PNG") and "The top 5 of" in caption.value

    box.value = "What say you, my"
    assert bytes(picture.value).startswith(b"\x89PNG") and bytes(picture.value) != first  # a new prompt, a new picture
    top = top_next_tokens(next_token_logits(model, tokenizer.encode("What say you, my")), tokenizer, 5)
    assert f"{sum(p for _, p in top):.0%} of the probability" in caption.value

    box.value = ""
    assert bytes(picture.value) == b"" and "<p>" in caption.value and "empty" in caption.value.lower()


def test_next_token_explorer_shows_its_picture_without_a_kernel(tokenizer, tiny_llama):
    widget = vs.next_token_explorer(tiny_llama(tokenizer.vocab_size), tokenizer, "Good morrow")
    static = static_html(widget)  # what GitHub or nbviewer shows, beside the live view
    png = base64.b64encode(widget.children[1].value).decode()
    assert f'src="data:image/png;base64,{png}"' in static
    assert "Good morrow" in static and widget.children[2].value in static
