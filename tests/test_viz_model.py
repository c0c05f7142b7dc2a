"""Notebooks 02 and 03's pictures and widgets, headless: each draws a titled, labelled figure and
each widget redraws when its controls change. A tiny random model keeps the tests fast; the
tokenizer is the shipped one."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from llmkit.model import embeddings as E  # noqa: E402
from llmkit.viz import attention as va  # noqa: E402
from llmkit.viz import embeddings as ve  # noqa: E402
from llmkit.tokens.words import word_token  # noqa: E402


@pytest.fixture(scope="module")
def model(tokenizer, tiny_llama):
    return tiny_llama(tokenizer.vocab_size, context_length=64)


def assert_labelled(fig) -> None:
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title(), "every plot needs a title"
        assert ax.get_xlabel() and ax.get_ylabel(), f"unlabelled axes in {ax.get_title()!r}"


# ---------------------------------------------------------------- notebook 02
def test_neighbours_text_lists_words_with_rounded_cosines(model, tokenizer):
    text = ve.neighbours_text(model.embed.weight, tokenizer, [" king", " love"], k=3)
    lines = text.splitlines()
    king, love = word_token(tokenizer, "king"), word_token(tokenizer, "love")
    assert len(lines) == 2 and lines[0].split()[0] == ve.token_text(tokenizer, king)
    assert lines[1].split()[0] == ve.token_text(tokenizer, love)
    near = E.nearest_neighbours(model.embed.weight, king, k=3,
                                candidates=E.word_token_ids(tokenizer))
    assert lines[0].split("-> ")[1] == ", ".join(f"{ve.token_text(tokenizer, i)} {s:.2f}" for i, s in near)
    with pytest.raises(ValueError, match="not one"):
        ve.neighbours_text(model.embed.weight, tokenizer, [" Mumbai"])


def test_neighbours_explorer_redraws_and_explains_multi_token_words(model, tokenizer):
    widget = ve.neighbours_explorer(model.embed.weight, tokenizer)
    box, view = widget.children
    shown = word_token(tokenizer, ve.DEFAULT_WORD)
    assert box.value == ve.DEFAULT_WORD and f"(id {shown})" in view.value and view.value.count("<tr>") == 9
    before = view.value
    box.value = " love"
    assert view.value != before and ve.token_text(tokenizer, word_token(tokenizer, "love")) in view.value
    box.value = " Mumbai"
    assert "not one" in view.value and "<tr>" not in view.value


def test_embedding_plots_are_titled_and_labelled(model, tokenizer):
    ids = [word_token(tokenizer, w) for w in ("king", "queen", "love", "thou")]
    labels = [ve.token_text(tokenizer, i) for i in ids]
    assert_labelled(ve.plot_vectors(model.embed.weight, ids, labels))
    points, explained = E.project_2d(model.embed.weight[ids])
    fig = ve.plot_word_map(points, labels, ["royal", "royal", "feeling", "pronoun"], explained)
    assert_labelled(fig)
    assert len(fig.axes[0].collections) == 3  # one colour per group
    assert "% of the variance" in fig.axes[0].get_title()



def test_word_map_labels_never_overlap_and_crowded_ones_are_named():
    # ten dots: five far apart, five crowded into one spot, with long labels
    spread = [[x, x % 2] for x in range(0, 50, 10)]
    crowd = [[20 + 0.01 * i, 0.5] for i in range(5)]
    labels = [f"word{i}" for i in range(5)] + [f"crowded_label_{i}" for i in range(5)]
    fig = ve.plot_word_map(torch.tensor(spread + crowd, dtype=torch.float32), labels, ["a"] * 5 + ["b"] * 5)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    written = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts if t.get_text() in labels}
    note = [t.get_text() for t in ax.texts if t.get_text().startswith("not labelled")]
    assert all(f"word{i}" in written for i in range(5))  # dots with room keep their labels
    assert note and all((label in written) != (label in note[0]) for label in labels)  # each label: drawn or named
    boxes = list(written.values())
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])

def test_position_plots_are_titled_and_labelled():
    generator = torch.Generator().manual_seed(0)
    query, key = torch.randn(16, generator=generator), torch.randn(16, generator=generator)
    table = torch.randn(24, 16, generator=generator)
    fig = ve.plot_rope_angles(head_dim=16, n_positions=24)
    assert_labelled(fig)
    assert len(fig.axes[1].lines) == 3 and "per step" in fig.axes[1].get_legend().get_texts()[0].get_text()
    assert_labelled(ve.plot_position_scores(E.rope_score_grid(query, key, 24), E.learned_score_grid(query, key, table)))
    assert_labelled(ve.plot_position_table(table, n_positions=24, n_dims=16))


def test_patch_plot_shows_the_grid_and_the_matrix():
    image = np.random.default_rng(0).random((112, 84, 3))
    patches = E.patchify(image, patch=28)
    fig = ve.plot_patches(image, patches, patch=28)
    assert_labelled(fig)
    assert "4x3 = 12 patches" in fig.axes[0].get_title()
    assert len(fig.axes[0].texts) == 12  # every patch numbered


# ---------------------------------------------------------------- notebook 03
def test_look_inside_records_the_forward_pass(model, tokenizer):
    looked = va.look_inside(model, tokenizer, va.DEFAULT_TEXT)
    n = len(tokenizer.encode(va.DEFAULT_TEXT))
    assert looked.labels[0] == "When" and len(looked.ids) == n
    assert looked.attention.shape == (2, 4, n, n) and looked.residual.shape == (3, n, 32)
    assert torch.allclose(looked.attention.sum(-1), torch.ones(2, 4, n), atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(looked.logits, model(torch.tensor([looked.ids]))[0], atol=1e-5)
    assert torch.allclose(looked.lens[-1], looked.logits, atol=1e-5)
    with pytest.raises(ValueError, match="empty"):
        va.look_inside(model, tokenizer, "")


def test_links_and_previous_token_scores():
    pattern = torch.tensor([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.2, 0.7, 0.1]])
    links = va.strongest_links(pattern, ["a", "b", "c"])
    assert links == [("b", "a", pytest.approx(0.9)), ("c", "b", pytest.approx(0.7))]
    attention = pattern.expand(2, 3, 3, 3)  # 2 layers x 3 heads, all the same
    assert torch.allclose(va.previous_token_scores(attention), torch.full((2, 3), (0.9 + 0.7) / 2))
    assert_labelled(va.plot_head_scores(va.previous_token_scores(attention), "t", "score"))
    table = va.format_head_table(torch.tensor([[0.123, 1.0], [0.0, 0.456]]), "weights:").splitlines()
    assert table[0] == "weights:" and table[1].split() == ["head", "0", "head", "1"]
    assert table[2].split() == ["layer", "0:", "0.12", "1.00"] and table[3].split() == ["layer", "1:", "0.00", "0.46"]


def test_attention_plots_are_titled_and_labelled(model, tokenizer):
    looked = va.look_inside(model, tokenizer, "To be, or not to be")
    assert_labelled(va.plot_causal_mask(looked.labels))
    fig = va.plot_attention(looked.attention[0, 0], looked.labels, "layer 0, head 0")
    assert_labelled(fig)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == looked.labels
    assert_labelled(va.plot_residual_norms(looked.residual, looked.labels))
    assert_labelled(va.plot_logit_lens(looked, tokenizer))
    top = va.top_next_tokens(looked.logits[-1], tokenizer, k=10)
    assert len(top) == 10 and all(a >= b for (_, a), (_, b) in zip(top, top[1:]))
    assert_labelled(va.plot_next_tokens(top, "next token"))


def test_logit_lens_text_ends_with_the_model_output(model, tokenizer):
    looked = va.look_inside(model, tokenizer, "To be, or not to be")
    lines = va.logit_lens_text(looked, tokenizer, k=2).splitlines()
    assert len(lines) == 1 + 2 + 1  # heading, two layers, the model
    assert lines[-2].split(":", 1)[1] == lines[-1].split(":", 1)[1]  # the last layer is the model's answer




def test_ablation_plot_draws_each_rise_per_layer_and_part():
    from llmkit.model.inspect import Ablation

    effects = Ablation(baseline=4.0, attention=[4.1, 4.3, 4.0], mlp=[7.5, 4.05, 4.2])
    fig = va.plot_ablation(effects)
    assert_labelled(fig)
    ax = fig.axes[0]
    heights = [round(bar.get_height(), 6) for bar in ax.patches]
    assert heights == [0.1, 0.3, 0.0, 3.5, 0.05, 0.2]  # attention's three rises, then the MLP's
    assert "4.00" in ax.get_title()

def test_neuron_contexts_list_the_strongest_positions_first(tokenizer):
    ids = torch.tensor([tokenizer.encode("To be, or not to be, that is the question")])
    activations = torch.zeros(1, ids.size(1), 3)
    activations[0, 5, 2], activations[0, 2, 2] = 9.0, 4.0  # neuron 2 fires at positions 5, then 2
    lines = va.neuron_contexts_text(tokenizer, ids, activations, neuron=2, k=2, context=3).splitlines()
    assert lines[0].startswith("neuron 2: its 2 strongest")
    assert lines[1].split()[0] == "9.00" and lines[2].split()[0] == "4.00"
    expected = va.token_labels(tokenizer, [int(ids[0, 5])])[0]
    assert lines[1].endswith(f"[{expected}]")
    assert repr(tokenizer.decode(ids[0, 2:5].tolist())) in lines[1]  # the three tokens before it

def test_attention_explorer_redraws_on_every_control(model, tokenizer):
    widget = va.attention_explorer(model, tokenizer)
    box, (layer, head), picture, caption = widget.children[0], widget.children[1].children, *widget.children[2:]
    assert box.value == va.DEFAULT_TEXT and bytes(picture.value).startswith(b"\x89PNG")
    assert "When" in caption.value
    seen = {bytes(picture.value)}
    for control, value in ((head, 2), (layer, 1), (box, "To be, or not to be")):
        control.value = value
        assert bytes(picture.value) not in seen, f"changing the {control.description} did not redraw"
        seen.add(bytes(picture.value))
    be = va.token_labels(tokenizer, [word_token(tokenizer, "be")])[0]  # "␣be" or "be", as the pre-split has it
    assert f"<code>{be}</code>" in caption.value and "Mumbai" not in caption.value
    box.value = ""
    assert bytes(picture.value) == b"" and "empty" in caption.value  # explained, not raised
    box.value = "word " * 100  # longer than the context
    assert "context_length" in caption.value
