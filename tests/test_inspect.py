"""Looking inside: attention patterns, the residual stream and the logit lens from one forward pass."""
import pytest
import torch

from llmkit.model.inspect import ablate, ablation_effects, capture, mlp_neurons
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


# --- ablation ------------------------------------------------------------------------------------

def no_hooks_left(model: Transformer) -> bool:
    return all(not module._forward_hooks and not module._forward_pre_hooks for module in model.modules())


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_ablating_nothing_changes_nothing(name):
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config)
    with ablate(model):
        ablated = model(ids)
    assert torch.equal(ablated, model(ids))


@pytest.mark.parametrize("part", ["attention", "mlp"])
@torch.no_grad()
def test_ablating_a_part_changes_the_logits_and_leaves_the_model_as_it_was(part):
    config = CONFIGS["llama_gqa"]
    model, ids = make(config), random_ids(config)
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    before = model(ids)
    with ablate(model, **{part: [1]}):
        ablated = model(ids)
    assert not torch.allclose(ablated, before, atol=1e-4)
    assert torch.equal(model(ids), before)  # hooks gone: the model computes what it did before
    assert no_hooks_left(model)
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in weights.items())


@torch.no_grad()
def test_an_ablated_part_adds_nothing_to_the_residual_stream():
    config = CONFIGS["gpt2"]
    model, ids = make(config), random_ids(config)
    with ablate(model, attention=[2], mlp=[2]), capture(model) as trace:
        model(ids)
    assert torch.equal(trace.residual[2], trace.residual[1])  # block 2 passed the stream on unchanged


def test_ablate_removes_its_hooks_after_an_error_and_rejects_missing_layers():
    model = make(CONFIGS["gpt2"])
    with pytest.raises(RuntimeError, match="inside"):
        with ablate(model, mlp=[0]):
            raise RuntimeError("an error inside the block")
    assert no_hooks_left(model)
    with pytest.raises(ValueError, match=r"layers \[3\] do not exist"):
        with ablate(model, attention=[3]):
            pass
    assert no_hooks_left(model)


@torch.no_grad()
def test_ablation_effects_scores_each_part_alone():
    config = CONFIGS["llama_gqa"]
    model, ids = make(config), random_ids(config)

    def loss(m: Transformer) -> float:
        logits = m(ids[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).item()

    effects = ablation_effects(model, loss)
    assert effects.baseline == loss(model)
    assert len(effects.attention) == len(effects.mlp) == config.n_layers
    with ablate(model, mlp=[1]):
        assert effects.mlp[1] == loss(model)
    assert effects.increase("mlp")[1] == effects.mlp[1] - effects.baseline
    assert len(set(effects.attention + effects.mlp)) > 1  # the parts differ in what they are worth
    with pytest.raises(ValueError, match="attention"):
        effects.increase("embedding")


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_mlp_neurons_are_what_the_last_matrix_reads(name):
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config)
    outputs = []
    handle = model.blocks[1].mlp.register_forward_hook(lambda _m, _i, output: outputs.append(output))
    neurons = mlp_neurons(model, ids, layer=1)
    handle.remove()
    assert neurons.shape == (2, 11, config.d_ff)
    assert torch.allclose(model.blocks[1].mlp.down(neurons), outputs[0], atol=1e-6)  # down(neurons) is the MLP's output
    assert no_hooks_left(model)
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        mlp_neurons(model, ids, layer=3)
