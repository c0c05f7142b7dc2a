"""Notebook 01's pictures: the data behind them and the live comparison widget."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from llmkit.paths import data_path  # noqa: E402
from llmkit.tokens.tokenizer import Tokenizer  # noqa: E402
from llmkit.viz import tokens as viz  # noqa: E402
from llmkit.viz.first_taste import show_piece  # noqa: E402


@pytest.fixture(scope="module")
def course():
    return Tokenizer.load(data_path("models", "base", "tokenizer.json"))


def test_pieces_spell_the_text(course):
    text = "A capybara ate my strawberry 🍓 <|endoftext|>"
    pieces = viz.pieces(course, text)
    assert b"".join(piece for _, piece in pieces) == text.encode("utf-8")
    assert [token_id for token_id, _ in pieces] == course.encode(text, disallowed_special=())


def test_tokens_html_shows_each_tokenizer(course):
    page = viz.tokens_html({"course": course, "again": course}, "to be")
    n = len(course.encode("to be"))
    assert page.count(f"{n} tokens for 5 characters") == 2
    assert all(f"<code>{show_piece(course.token_bytes(i))}</code>" in page for i in course.encode("to be"))  # "␣be", or "␣" and "be"
    assert "␣" in page and "&lt;" not in page
    special_as_text = viz.tokens_html({"course": course}, "<|user|>")
    assert "<code>&lt;</code>" in special_as_text and "<|" not in special_as_text  # escaped, never raw HTML


def test_bpe_steps_shrink_the_sentence():
    sentence = "the cat sat on the mat"
    steps = viz.bpe_steps(sentence, 5)
    lengths = [len(step["pieces"]) for step in steps]
    assert lengths[0] == len(sentence.encode()) and steps[0]["merged"] is None
    assert all(later < earlier for earlier, later in zip(lengths, lengths[1:]))
    assert steps[1]["merged"] == (b"a", b"t", b"at")
    for step in steps:
        assert b"".join(piece for _, piece in step["pieces"]) == sentence.encode()
    assert viz.bpe_steps_html(steps).count("<tr>") == 7


def test_characters_per_token_and_table(course):
    rows = viz.characters_per_token({"english": "the king", "emoji": "🍓🍓"}, {"course": course})
    assert rows[0]["course"] == len("the king") / len(course.encode("the king"))
    assert rows[1]["course"] == 2 / 8  # each emoji is 4 bytes, none merged in Shakespeare
    table = viz.format_table(rows)
    assert table.splitlines()[0].split() == ["text", "characters", "course"] and "0.25" in table


def test_compare_widget_redraws_when_the_text_changes(course):
    widget = viz.compare_tokens({"course": course})
    box, view = widget.children
    assert box.value == viz.DEFAULT_TEXT and "capybara" not in view.value.split("</b>")[0]
    before = view.value
    box.value = "Hindi: नमस्ते"
    assert view.value != before and view.value == viz.tokens_html({"course": course}, "Hindi: नमस्ते")


def test_plots_have_titles_and_labels():
    fig = viz.plot_vocab_tradeoff([256, 512], [1.0, 2.0], d_model=64)
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and fig.axes[1].get_ylabel()
    rows = [{"text": "a", "x": 1.0, "y": 2.0}]
    bars = viz.plot_characters_per_token(rows, ["x", "y"]).axes[0]
    assert bars.get_title() and bars.get_xlabel() and bars.get_ylabel()
    matplotlib.pyplot.close("all")
