"""The transformer: config checks, shapes, both attention forms, errors, parameter and cost counts."""
import json

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.model.kvcache import KVCache
from llmkit.model.config import count_params, estimate_cost
from llmkit.model.transformer import ModelConfig, Transformer
from tiny_configs import FAMILIES, TINY



def make(config: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(config).eval()


def ids_for(config: ModelConfig, batch: int = 2, time: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (batch, time), generator=torch.Generator().manual_seed(seed))


def set_explicit(model: Transformer, explicit: bool) -> None:
    for block in model.blocks:
        block.attn.explicit = explicit


# --- config --------------------------------------------------------------------------------------

def test_presets_choose_the_family_defaults():
    gpt2 = ModelConfig.gpt2(vocab_size=4096, context_length=256, d_model=384, n_layers=6, n_heads=6)
    llama = ModelConfig.llama(vocab_size=2048, context_length=256, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2)
    assert (gpt2.norm, gpt2.mlp, gpt2.positions, gpt2.bias, gpt2.family) == ("layernorm", "gelu", "learned", True, "gpt2")
    assert (llama.norm, llama.mlp, llama.positions, llama.bias, llama.family) == ("rmsnorm", "swiglu", "rope", False, "llama")
    assert gpt2.d_ff == 4 * 384 and gpt2.n_kv_heads == 6
    # SwiGLU's three matrices at ~8/3 width cost about what GPT-2's two at 4x do
    assert llama.d_ff % 32 == 0 and 8 / 3 * 256 <= llama.d_ff < 8 / 3 * 256 + 32
    assert ModelConfig(**TINY, mlp="swiglu", d_ff=50).d_ff == 50  # an explicit width wins


@pytest.mark.parametrize("fields, names", [
    (dict(d_model=30), ["d_model (30)", "n_heads (4)"]),
    (dict(n_kv_heads=3), ["n_heads (4)", "n_kv_heads (3)"]),
    (dict(d_model=20, n_heads=4, positions="rope"), ["head_dim", "5"]),
    (dict(norm="batchnorm"), ["norm", "batchnorm"]),
    (dict(mlp="relu"), ["mlp", "relu"]),
    (dict(positions="alibi"), ["positions", "alibi"]),
    (dict(vocab_size=0), ["vocab_size"]),
    (dict(n_layers=2.5), ["n_layers"]),
    (dict(dropout=1.0), ["dropout"]),
    (dict(rope_theta=-1.0), ["rope_theta"]),
    (dict(bias="yes"), ["bias"]),
])
def test_inconsistent_configs_fail_naming_the_fields(fields, names):
    with pytest.raises(ValueError) as err:
        ModelConfig(**{**TINY, **fields})
    for name in names:
        assert name in str(err.value)


def test_odd_head_dim_is_fine_without_rope():
    assert ModelConfig(**{**TINY, "d_model": 20, "positions": "learned"}).head_dim == 5


def test_every_problem_is_reported_at_once():
    with pytest.raises(ValueError) as err:
        ModelConfig(**{**TINY, "d_model": 30, "norm": "nope", "dropout": 2.0})
    assert all(word in str(err.value) for word in ("d_model", "norm", "dropout"))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_config_round_trips_through_json(name):
    config = FAMILIES[name]
    again = ModelConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.to_dict() == config.to_dict()


def test_from_dict_rejects_unknown_and_missing_fields():
    with pytest.raises(ValueError, match="n_embd"):
        ModelConfig.from_dict({**TINY, "n_embd": 32})
    with pytest.raises(ValueError, match="vocab_size"):
        ModelConfig.from_dict({k: v for k, v in TINY.items() if k != "vocab_size"})


@settings(max_examples=25, deadline=None)
@given(n_kv=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([2, 4, 8]), n_layers=st.integers(1, 3),
       family=st.sampled_from(["gpt2", "llama"]), bias=st.booleans(), tie=st.booleans(), vocab=st.integers(2, 50))
def test_param_count_formula_matches_the_built_model(n_kv, head_dim, n_layers, family, bias, tie, vocab):
    preset = ModelConfig.gpt2 if family == "gpt2" else ModelConfig.llama
    config = preset(vocab_size=vocab, context_length=16, d_model=4 * head_dim, n_layers=n_layers, n_heads=4,
                    n_kv_heads=n_kv, bias=bias, tie_embeddings=tie)
    assert ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    model = Transformer(config)
    assert model.num_params() == sum(p.numel() for p in model.parameters()) == count_params(config)


# --- forward -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(FAMILIES))
def test_forward_gives_logits_per_position(name):
    config = FAMILIES[name]
    logits = make(config)(ids_for(config, batch=3, time=7))
    assert logits.shape == (3, 7, config.vocab_size) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_explicit_and_fast_attention_agree(name):
    config = FAMILIES[name]
    model, ids = make(config), ids_for(config, time=config.context_length)
    fast = model(ids)
    set_explicit(model, True)
    explicit = model(ids)
    assert (fast - explicit).abs().max() < 1e-5
    assert not torch.equal(fast, make(config, seed=1)(ids))  # control: the comparison can fail


@pytest.mark.parametrize("n_queries, n_keys, n_kv_heads", [(5, 5, 4), (1, 9, 4), (3, 11, 2), (6, 6, 1)])
def test_attention_forms_agree_on_raw_tensors(n_queries, n_keys, n_kv_heads):
    """Including queries that follow a cached prefix (fewer queries than keys) and grouped heads."""
    config = ModelConfig.llama(**TINY, n_kv_heads=n_kv_heads)
    attention = make(config).blocks[0].attn
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, n_queries, 8, generator=gen)
    k, v = torch.randn(2, 2, n_kv_heads, n_keys, 8, generator=gen).unbind(0)
    fast, explicit = attention.fast_attention(q, k, v), attention.explicit_attention(q, k, v)
    assert fast.shape == (2, 4, n_queries, 8)
    assert (fast - explicit).abs().max() < 1e-5


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_future_tokens_never_change_earlier_logits(name):
    config = FAMILIES[name]
    model, ids = make(config), ids_for(config, time=10)
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % config.vocab_size
    a, b = model(ids), model(changed)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_last_only_is_the_last_row_of_the_full_logits():
    config = FAMILIES["llama"]
    model, ids = make(config), ids_for(config)
    assert torch.allclose(model(ids, last_only=True), model(ids)[:, -1:], atol=1e-6)


def test_rope_depends_only_on_relative_positions():
    """Shifting every position by the same amount leaves RoPE attention unchanged; learned tables differ."""
    ids = ids_for(FAMILIES["llama"], time=8)
    rope, learned = make(FAMILIES["llama"]), make(FAMILIES["gpt2"])
    assert (rope(ids) - rope(ids, start_pos=20)).abs().max() < 1e-4
    assert (learned(ids) - learned(ids, start_pos=20)).abs().max() > 1e-3


def test_dropout_is_active_only_in_training():
    config = ModelConfig.llama(**TINY, dropout=0.5)
    model, ids = make(config), ids_for(config)
    assert torch.equal(model(ids), model(ids))
    model.train()
    assert not torch.equal(model(ids), model(ids))


@pytest.mark.slow  # 20 optimiser steps: fast alone, several seconds on a busy 2-core machine
def test_a_few_steps_of_training_lower_the_loss():
    config = FAMILIES["llama"]
    model, ids = make(config).train(), ids_for(config, batch=4, time=16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_bf16_autocast_runs_forward_backward_and_cached_decode(name):
    config = FAMILIES[name]
    model, ids = make(config), ids_for(config)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids)
        logits.float().logsumexp(-1).mean().backward()
        cache = model.new_cache(batch_size=2)
        model(ids, cache=cache)
        step = model(ids[:, :1], cache=cache)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(step).all()
    assert model.embed.weight.grad is not None


# --- bad input -----------------------------------------------------------------------------------

def test_too_long_a_sequence_names_both_numbers():
    config = FAMILIES["gpt2"]
    model = make(config)
    with pytest.raises(ValueError, match=r"65.*context_length is 64"):
        model(ids_for(config, time=65))
    cache = model.new_cache(batch_size=2)
    model(ids_for(config, time=60), cache=cache)
    with pytest.raises(ValueError, match=r"start 60 \+ 5 new tokens.*context_length is 64"):
        model(ids_for(config, time=5), cache=cache)
    assert model(ids_for(config, time=4), cache=cache).shape == (2, 4, config.vocab_size)  # exactly full is fine


def test_ids_outside_the_vocabulary_are_named():
    config = FAMILIES["llama"]
    model, ids = make(config), ids_for(config)
    ids[1, 3] = config.vocab_size + 5
    with pytest.raises(ValueError, match=f"token id {config.vocab_size + 5} is outside"):
        model(ids)
    ids[1, 3] = -2
    with pytest.raises(ValueError, match="token id -2"):
        model(ids)
    with pytest.raises(ValueError, match="token id -2"):  # the same check with a KV cache
        model(ids, cache=model.new_cache(batch_size=2))


def test_wrong_ids_type_or_shape_say_what_to_do():
    model = make(FAMILIES["gpt2"])
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"ids\[None\]"):
        model(torch.zeros(3, dtype=torch.long))


# --- counting ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(FAMILIES))
def test_num_params_counts_each_parameter_once(name):
    config = FAMILIES[name]
    model = make(config)
    assert model.num_params() == sum(p.numel() for p in model.parameters()) == count_params(config)
    assert (model.lm_head.weight is model.embed.weight) == config.tie_embeddings
    embeddings = model.embed.weight.numel() + (model.pos_embed.weight.numel() if model.pos_embed is not None else 0)
    assert model.num_params(include_embeddings=False) == model.num_params() - embeddings


def test_cost_estimate_matches_the_cache_and_grows_with_context():
    config = ModelConfig.llama(vocab_size=2048, context_length=256, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2)
    cost = estimate_cost(config, 256)
    cache = KVCache(config, batch_size=1, max_length=256)
    assert cost.kv_cache_bytes == cache.nbytes and cost.kv_cache_bytes_per_token * 256 == cache.nbytes
    assert cost.params == Transformer(config).num_params()
    assert estimate_cost(config, 256, dtype=torch.bfloat16).kv_cache_bytes == cache.nbytes // 2
    # weights cost the same for every token; attention grows linearly per token, quadratically per prompt
    short, long = estimate_cost(config, 64), estimate_cost(config, 128)
    assert long.decode_attention_flops_per_token == 2 * short.decode_attention_flops_per_token
    assert long.decode_flops_per_token - long.decode_attention_flops_per_token == 2 * long.matmul_params
    attention_prefill = lambda c: c.prefill_flops - 2 * c.matmul_params * c.context_length  # noqa: E731
    assert 3.9 < attention_prefill(long) / attention_prefill(short) < 4.1
    # grouped-query attention shrinks the cache by n_heads / n_kv_heads
    mha = ModelConfig.llama(vocab_size=2048, context_length=256, d_model=256, n_layers=4, n_heads=4)
    assert estimate_cost(mha, 256).kv_cache_bytes == 2 * cost.kv_cache_bytes


# --- devices -------------------------------------------------------------------------------------

DEVICES = ["cpu",
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")),
           pytest.param("mps", marks=pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS"))]


@pytest.mark.parametrize("device", DEVICES)
def test_device_argument_is_honoured(device):
    config = FAMILIES["llama"]
    model = Transformer(config, device=device).eval()
    assert all(p.device.type == device for p in model.parameters())
    assert all(b.device.type == device for b in model.buffers())
    ids = ids_for(config).to(device)
    logits = model(ids)
    assert logits.device.type == device
    cache = model.new_cache(batch_size=2)
    assert cache.keys[0].device.type == device
    assert (model(ids, cache=cache) - logits).abs().max().item() < 1e-4


def test_the_fused_projection_splits_by_hand_into_q_k_v():
    """Notebooks 02 and 03 split ``attn.qkv``'s output with ``attn.split`` to look at one head."""
    config = ModelConfig.llama(vocab_size=32, context_length=8, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2)
    attn = Transformer(config).blocks[0].attn
    q, k, v = attn.qkv(torch.randn(3, 32)).split(attn.split, dim=-1)
    assert (q.shape[-1], k.shape[-1], v.shape[-1]) == (32, 16, 16)
