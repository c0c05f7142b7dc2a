"""Looking inside: attention patterns, the residual stream and the logit lens from one forward pass."""
import pytest
import torch

from llmkit.model.inspect import capture
from llmkit.model.transformer import ModelConfig, Transformer

SHAPE = dict(vocab_size=89, context_length=32, d_model=48, n_layers=3, n_heads=6)
CONFIGS = {"gpt2": ModelConfig.gpt2(**SHAPE), "llama_gqa": ModelConfig.llama(**SHAPE, n_kv_heads=2)}


def make(config: ModelConfig) -> Transformer:
    torch.manual_seed(0)
    return Transformer(config).eval()


def random_ids(config: ModelConfig, batch: int = 2, time: int = 11) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (batch, time), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_capture_records_every_layer(name):
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config)
    with capture(model) as trace:
        logits = model(ids)
    assert len(trace.attention) == len(trace.residual) == config.n_layers
    for pattern, stream in zip(trace.attention, trace.residual):
        assert pattern.shape == (2, config.n_heads, 11, 11)  # all query heads, even with shared kv heads
        assert stream.shape == (2, 11, config.d_model)
        assert torch.allclose(pattern.sum(-1), torch.ones(2, config.n_heads, 11), atol=1e-5)
        assert torch.all(pattern.triu(diagonal=1) == 0)  # no position looks ahead
        assert torch.all(pattern[..., torch.ones(11, 11, dtype=torch.bool).tril()] > 0)  # nor ignores the past
    assert trace.embedding.shape == (2, 11, config.d_model)
    assert torch.equal(model.lm_head(model.norm(trace.residual[-1])), logits)


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_logit_lens_last_layer_is_the_model_output(name):
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config)
    with capture(model) as trace:
        logits = model(ids)
    lens = trace.logit_lens()
    assert lens.shape == (config.n_layers, 2, 11, config.vocab_size)
    assert torch.allclose(lens[-1], logits, atol=1e-6)
    assert not torch.allclose(lens[0], logits, atol=1e-3)  # earlier layers predict something else
    assert torch.allclose(trace.logit_lens(position=-1), lens[:, :, -1], atol=1e-6)  # one row vs all: same maths


@torch.no_grad()
def test_embedding_is_what_enters_the_first_block():
    config = CONFIGS["gpt2"]
    model, ids = make(config), random_ids(config)
    with capture(model) as trace:
        model(ids)
    expected = model.embed(ids) + model.pos_embed.weight[: ids.size(1)]
    assert torch.equal(trace.embedding, expected)


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_capture_leaves_the_model_as_it_was(name):
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config)
    before = model(ids)
    with capture(model) as trace:
        during = model(ids)
    after = model(ids)
    assert (during - before).abs().max() < 1e-5  # the explicit attention gives the same answer
    assert torch.equal(after, before)
    assert not any(block.attn.explicit for block in model.blocks)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    model(random_ids(config, time=5))  # later passes outside the block are not recorded
    assert trace.attention[0].shape[-1] == 11


@torch.no_grad()
def test_capture_during_cached_decoding_shows_one_query_row():
    config = CONFIGS["llama_gqa"]
    model, ids = make(config), random_ids(config, batch=1, time=9)
    cache = model.new_cache()
    model(ids[:, :8], cache=cache)
    with capture(model) as trace:
        model(ids[:, 8:], cache=cache)
    with capture(model) as full:
        model(ids)
    assert trace.attention[1].shape == (1, config.n_heads, 1, 9)
    assert torch.allclose(trace.attention[1][:, :, 0], full.attention[1][:, :, -1], atol=1e-5)


def test_logit_lens_before_any_pass_explains_itself():
    model = make(CONFIGS["gpt2"])
    with capture(model) as trace:
        pass
    with pytest.raises(RuntimeError, match="inside"):
        trace.logit_lens()


def test_hooks_are_removed_even_when_the_pass_fails():
    config = CONFIGS["gpt2"]
    model = make(config)
    with pytest.raises(ValueError):
        with capture(model):
            model(torch.full((1, 3), config.vocab_size))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert not any(block.attn.explicit for block in model.blocks)
