"""The KV cache: cached decoding equals the full forward, in place, with its size visible."""
import pytest
import torch

from llmkit.model.kvcache import KVCache
from llmkit.model.transformer import ModelConfig, Transformer

SHAPE = dict(vocab_size=101, context_length=256, d_model=48, n_layers=2, n_heads=6)
CONFIGS = {
    "gpt2": ModelConfig.gpt2(**SHAPE),
    "llama_gqa": ModelConfig.llama(**SHAPE, n_kv_heads=2),
    "llama_mqa_untied": ModelConfig.llama(**SHAPE, n_kv_heads=1, tie_embeddings=False),
}


def make(config: ModelConfig) -> Transformer:
    torch.manual_seed(0)
    return Transformer(config).eval()


def random_ids(config: ModelConfig, batch: int, time: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (batch, time), generator=torch.Generator().manual_seed(seed))


@pytest.mark.slow  # 240 decode steps per family: ~1 s alone, several on a busy 2-core machine
@pytest.mark.parametrize("name", list(CONFIGS))
@torch.inference_mode()
def test_prefill_then_one_token_at_a_time_equals_the_full_forward(name):
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config, batch=2, time=config.context_length)
    full = model(ids)
    cache = model.new_cache(batch_size=2)
    steps = [model(ids[:, :16], cache=cache)]  # prefill
    for t in range(16, config.context_length):  # 240 single-token decode steps
        steps.append(model(ids[:, t:t + 1], cache=cache))
        assert cache.length == t + 1
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-4


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.inference_mode()
def test_prefill_in_uneven_chunks_equals_the_full_forward(name):
    """Several new tokens after a cached prefix need the offset causal mask."""
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config, batch=3, time=60)
    cache = model.new_cache(batch_size=3, max_length=64)
    chunks, start = [], 0
    for size in (7, 1, 13, 2, 30, 7):
        chunks.append(model(ids[:, start:start + size], cache=cache))
        start += size
    assert (torch.cat(chunks, dim=1) - model(ids)).abs().max() < 1e-4


@pytest.mark.parametrize("name", list(CONFIGS))
def test_shape_and_size_follow_the_kv_heads(name):
    config = CONFIGS[name]
    cache = KVCache(config, batch_size=3, max_length=100)
    head_dim = config.d_model // config.n_heads
    assert len(cache.keys) == len(cache.values) == config.n_layers
    assert cache.keys[0].shape == (3, config.n_kv_heads, 100, head_dim)
    assert cache.nbytes == 2 * config.n_layers * 3 * config.n_kv_heads * 100 * head_dim * 4
    assert KVCache(config, 3, 100, dtype=torch.bfloat16).nbytes == cache.nbytes // 2


def test_grouped_query_attention_stores_fewer_heads():
    mha, gqa = KVCache(CONFIGS["gpt2"]), KVCache(CONFIGS["llama_gqa"])
    assert mha.nbytes == 3 * gqa.nbytes  # 6 heads against 2


@torch.inference_mode()
def test_decoding_fills_the_same_memory_in_place():
    config = CONFIGS["llama_gqa"]
    model = make(config)
    cache = model.new_cache(batch_size=1, max_length=40)
    pointers, size = [t.data_ptr() for t in cache.keys + cache.values], cache.nbytes
    ids = random_ids(config, 1, 40)
    model(ids[:, :10], cache=cache)
    for t in range(10, 40):
        model(ids[:, t:t + 1], cache=cache)
    assert [t.data_ptr() for t in cache.keys + cache.values] == pointers and cache.nbytes == size
    assert cache.keys[0][:, :, :40].abs().sum() > 0


@torch.inference_mode()
def test_truncate_keeps_a_prefix_that_can_be_continued():
    config = CONFIGS["llama_gqa"]
    model = make(config)
    prefix, tail_a, tail_b = (random_ids(config, 1, n, seed=s) for n, s in ((20, 1), (5, 2), (5, 3)))
    cache = model.new_cache()
    model(prefix, cache=cache)
    model(tail_a, cache=cache)
    cache.truncate(20)  # forget tail_a, keep the shared prefix
    assert cache.length == 20
    reused = model(tail_b, cache=cache)
    fresh = model(torch.cat([prefix, tail_b], dim=1))[:, 20:]
    assert (reused - fresh).abs().max() < 1e-4
    with pytest.raises(ValueError, match="0..25"):
        cache.truncate(26)
    cache.reset()
    assert cache.length == 0
    assert (model(prefix, cache=cache) - model(prefix)).abs().max() < 1e-4


@torch.inference_mode()
def test_explicit_start_pos_rewrites_from_that_position():
    config = CONFIGS["gpt2"]
    model = make(config)
    ids, other = random_ids(config, 1, 12), random_ids(config, 1, 4, seed=9)
    cache = model.new_cache()
    model(ids, cache=cache)
    out = model(other, cache=cache, start_pos=8)  # replace positions 8..11
    assert cache.length == 12
    expected = model(torch.cat([ids[:, :8], other], dim=1))[:, 8:]
    assert (out - expected).abs().max() < 1e-4


@torch.inference_mode()
def test_batched_decode_equals_each_sequence_alone():
    config = CONFIGS["llama_gqa"]
    model, ids = make(config), random_ids(config, 3, 20)
    cache = model.new_cache(batch_size=3)
    model(ids[:, :10], cache=cache)
    batched = torch.cat([model(ids[:, t:t + 1], cache=cache) for t in range(10, 20)], dim=1)
    for row in range(3):
        alone = model(ids[row:row + 1])[:, 10:]
        assert (batched[row:row + 1] - alone).abs().max() < 1e-4


def test_misuse_gets_clear_errors():
    config = CONFIGS["gpt2"]
    model = make(config)
    with pytest.raises(ValueError, match=r"max_length \(300\).*context_length \(256\)"):
        KVCache(config, max_length=300)
    cache = model.new_cache(batch_size=2, max_length=10)
    with pytest.raises(ValueError, match="batch of 1 sequences but the cache holds 2"):
        model(random_ids(config, 1, 3), cache=cache)
    model(random_ids(config, 2, 8), cache=cache)
    with pytest.raises(ValueError, match=r"start 8 \+ 3 new tokens.*max_length is 10"):
        model(random_ids(config, 2, 3), cache=cache)
    with pytest.raises(ValueError, match="start_pos 9 is past the cached length 8"):
        model(random_ids(config, 2, 1), cache=cache, start_pos=9)
    assert cache.length == 8  # a refused call leaves the cache as it was


def test_new_cache_follows_the_model_dtype_and_device():
    model = make(CONFIGS["llama_gqa"]).to(torch.bfloat16)
    cache = model.new_cache(batch_size=2, max_length=32)
    assert cache.keys[0].dtype == torch.bfloat16 and cache.keys[0].device == model.device
    assert cache.max_length == 32 and cache.batch_size == 2
    assert "length=0/32" in repr(cache)


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.inference_mode()
def test_unwritten_cache_memory_is_never_read(name):
    """The cache is allocated uninitialised; poison it with NaN and nothing changes."""
    config = CONFIGS[name]
    model, ids = make(config), random_ids(config, batch=2, time=12)
    cache = model.new_cache(batch_size=2, max_length=40)
    cache.key_table.fill_(float("nan"))
    cache.value_table.fill_(float("nan"))
    logits = torch.cat([model(ids[:, :7], cache=cache), model(ids[:, 7:9], cache=cache),
                        model(ids[:, 9:10], cache=cache), model(ids[:, 10:], cache=cache)], dim=1)
    assert torch.isfinite(logits).all()
    assert (logits - model(ids)).abs().max() < 1e-4


def test_each_layer_is_a_view_of_one_table():
    config = CONFIGS["llama_gqa"]
    cache = KVCache(config, batch_size=2, max_length=20)
    assert cache.key_table.shape == (config.n_layers, 2, config.n_kv_heads, 20, config.d_model // config.n_heads)
    cache.update(1, 0, torch.ones(2, config.n_kv_heads, 3, 8), torch.full((2, config.n_kv_heads, 3, 8), 2.0))
    assert (cache.key_table[1, :, :, :3] == 1).all() and (cache.value_table[1, :, :, :3] == 2).all()
    assert cache.keys[1].data_ptr() == cache.key_table[1].data_ptr()
