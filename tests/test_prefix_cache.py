"""PrefixCache.load and store move keys and values between a request's KV cache and the block trie
exactly: what comes back is bit for bit what a prefill of those tokens wrote, and a match is exact
to the token."""
import sys
import threading

import pytest
import torch

from llmkit.generation.generate import generate
from llmkit.generation.prefix_cache import PrefixCache
from llmkit.model.transformer import ModelConfig, Transformer

CONFIG = ModelConfig.llama(vocab_size=101, context_length=128, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2)


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(CONFIG).eval()


def prefilled_cache(model, tokens):
    """A KV cache holding the prefill of ``tokens``."""
    cache = model.new_cache(max_length=64)
    model(torch.tensor([tokens]), cache=cache)
    return cache


@pytest.mark.parametrize("batch", [1, 2])
@torch.inference_mode()
def test_a_loaded_prefix_is_exactly_what_the_prefill_wrote(model, batch):
    tokens = torch.randint(0, CONFIG.vocab_size, (50,), generator=torch.Generator().manual_seed(1)).tolist()
    prefilled = prefilled_cache(model, tokens)
    prefix_cache = PrefixCache(max_bytes=2**24, block_size=16)
    prefix_cache.store(model, tokens, prefilled)
    assert prefix_cache.stats.blocks == 4  # three whole blocks of 16 and a tail of 2
    assert prefix_cache.nbytes == 50 * 2 * CONFIG.n_layers * CONFIG.n_kv_heads * CONFIG.head_dim * 4

    cache = model.new_cache(batch_size=batch, max_length=64)
    cache.key_table.fill_(float("nan"))  # whatever is not loaded stays visibly unset
    assert prefix_cache.load(model, tokens + [7, 8], cache) == 50 and cache.length == 50
    for row in range(batch):
        assert torch.equal(cache.key_table[:, row, :, :50], prefilled.key_table[:, 0, :, :50])
        assert torch.equal(cache.value_table[:, row, :, :50], prefilled.value_table[:, 0, :, :50])
    assert cache.key_table[:, :, :, 50:].isnan().all()


@torch.inference_mode()
def test_continuing_after_a_loaded_prefix_equals_the_full_prefill(model):
    tokens = torch.randint(0, CONFIG.vocab_size, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    prefix_cache, full = PrefixCache(max_bytes=2**24, block_size=8), model.new_cache()
    expected = model(torch.tensor([tokens]), cache=full, last_only=True)
    prefix_cache.store(model, tokens, full)
    cache = model.new_cache()
    reused = prefix_cache.load(model, tokens, cache)
    assert reused == 39  # all but the last token, which is always prefilled
    logits = model(torch.tensor([tokens[reused:]]), cache=cache, last_only=True)
    assert (logits - expected).abs().max() < 1e-5
    assert not torch.equal(logits, model(torch.tensor([tokens[:-1] + [0]]), last_only=True))  # control


@torch.inference_mode()
def test_a_match_stops_exactly_at_the_first_different_token(model):
    tokens = torch.randint(0, CONFIG.vocab_size, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    prefix_cache = PrefixCache(max_bytes=2**24, block_size=8)
    prefix_cache.store(model, tokens, prefilled_cache(model, tokens))
    for changed_at in (0, 1, 7, 8, 13, 31, 38):  # inside blocks, on block boundaries, in the tail
        changed = tokens[:changed_at] + [(tokens[changed_at] + 1) % CONFIG.vocab_size] + tokens[changed_at + 1:]
        assert prefix_cache.match_length(changed) == changed_at
        cache = model.new_cache(max_length=64)
        assert prefix_cache.load(model, changed, cache) == changed_at
        expected = prefilled_cache(model, changed).key_table[:, 0, :, :changed_at]
        assert torch.equal(cache.key_table[:, 0, :, :changed_at], expected)


@torch.inference_mode()
def test_a_longer_tail_replaces_the_shorter_ones_it_covers(model):
    tokens = torch.randint(0, CONFIG.vocab_size, (30,), generator=torch.Generator().manual_seed(4)).tolist()
    prefix_cache = PrefixCache(max_bytes=2**24, block_size=16)
    token_bytes = 2 * CONFIG.n_layers * CONFIG.n_kv_heads * CONFIG.head_dim * 4
    for length in (20, 25, 22, 30):  # 22 is inside the tail of 25: nothing new to keep
        prefix_cache.store(model, tokens[:length], prefilled_cache(model, tokens[:length]))
    assert prefix_cache.stats.blocks == 2 and prefix_cache.nbytes == 30 * token_bytes  # one block, one 14-token tail
    prefix_cache.store(model, tokens[:18] + [0] * 5, prefilled_cache(model, tokens[:18] + [0] * 5))
    assert prefix_cache.stats.blocks == 3  # a tail that parts from the other after 2 tokens is kept beside it
    assert prefix_cache.match_length(tokens[:18] + [0] * 5) == 22 and prefix_cache.match_length(tokens) == 29


@torch.inference_mode()
def test_tails_count_towards_the_budget_and_are_evicted_like_blocks(model):
    token_bytes = 2 * CONFIG.n_layers * CONFIG.n_kv_heads * CONFIG.head_dim * 4
    prefix_cache = PrefixCache(max_bytes=40 * token_bytes, block_size=8)
    for seed in range(6):  # six different 12-token prompts: 72 tokens for a 40-token budget
        tokens = torch.randint(0, CONFIG.vocab_size, (12,), generator=torch.Generator().manual_seed(10 + seed)).tolist()
        prefix_cache.store(model, tokens, prefilled_cache(model, tokens))
        assert prefix_cache.nbytes <= prefix_cache.max_bytes
    assert prefix_cache.stats.evictions > 0
    assert prefix_cache.match_length(tokens + [1]) == 12  # the newest prompt is still whole


# --- weights that change, and threads that share one cache ---------------------------------------

def fresh_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(CONFIG).eval()
    with torch.no_grad():  # weights large enough that a change shows in the greedy tokens
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("change", [
    lambda m: m.blocks[1].attn.qkv.weight.data.mul_(0.5),  # behind autograd's back: no version counter moves
    lambda m: m.load_state_dict(fresh_model(seed=7).state_dict()),
    lambda m: setattr(m.blocks[0].mlp.down, "weight", torch.nn.Parameter(torch.randn(48, 128))),  # a new tensor
])
def test_changed_weights_are_never_served_stale_keys_and_values(change):
    model = fresh_model()
    prefix_cache, prompt = PrefixCache(max_bytes=2**24, block_size=4), list(range(10, 40))
    generate(model, prompt, max_new_tokens=8, prefix_cache=prefix_cache)
    assert prefix_cache.match_length(prompt) == len(prompt) - 1
    change(model)
    cached = generate(model, prompt, max_new_tokens=8, prefix_cache=prefix_cache, keep_logits=True)
    fresh = generate(model, prompt, max_new_tokens=8, keep_logits=True)
    assert cached.usage.cache_read_input_tokens == 0  # the old blocks were dropped, not reused
    assert cached.tokens == fresh.tokens and torch.equal(cached.logits, fresh.logits)
    again = generate(model, prompt, max_new_tokens=8, prefix_cache=prefix_cache)
    assert again.usage.cache_read_input_tokens == len(prompt) - 1 and again.tokens == fresh.tokens  # reuse resumes


def test_several_threads_can_share_one_prefix_cache():
    """Eight threads, one model, one small cache (so evictions happen while others read): every
    request gives exactly the tokens it gives alone, and the counters add up."""
    model = fresh_model()
    token_bytes = 2 * CONFIG.n_layers * CONFIG.n_kv_heads * CONFIG.head_dim * 4
    prefix_cache = PrefixCache(max_bytes=120 * token_bytes, block_size=4)
    prompts = [[1 + i % 3] * 8 + list(range(20 + i, 34 + i)) for i in range(12)]  # shared starts, then apart
    expected = {tuple(p): generate(model, p, max_new_tokens=6).tokens for p in prompts}
    barrier, errors, calls = threading.Barrier(8), [], 8 * 3 * len(prompts) // 4

    def worker(index: int) -> None:
        barrier.wait()
        try:
            for round_ in range(3):
                for prompt in prompts[(index + round_) % 4::4]:
                    result = generate(model, prompt, max_new_tokens=6, prefix_cache=prefix_cache)
                    assert result.tokens == expected[tuple(prompt)]
        except BaseException as error:  # noqa: BLE001 (reported below, with its thread)
            errors.append((index, repr(error)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    stats = prefix_cache.stats
    assert stats.requests == calls and stats.hits > 0 and stats.nbytes <= prefix_cache.max_bytes
    assert stats.cached_tokens + stats.prefilled_tokens == calls * len(prompts[0])


@torch.inference_mode()
def test_loads_and_stores_from_many_threads_keep_the_trie_whole(model):
    """load and store straight from 8 threads, with a budget so small that most stores evict and
    threads switching as often as the interpreter allows: no error, and every load is exact."""
    prompts = [[1 + i % 3] * 8 + list(range(20 + i, 30 + i)) for i in range(16)]
    filled = [prefilled_cache(model, p) for p in prompts]
    token_bytes = 2 * CONFIG.n_layers * CONFIG.n_kv_heads * CONFIG.head_dim * 4
    prefix_cache = PrefixCache(max_bytes=40 * token_bytes, block_size=2)
    barrier, errors = threading.Barrier(8), []

    def worker(index: int) -> None:
        barrier.wait()
        try:
            for round_ in range(40):
                i = (index * 7 + round_) % len(prompts)
                prefix_cache.store(model, prompts[i], filled[i])
                cache = model.new_cache(max_length=64)
                reused = prefix_cache.load(model, prompts[i], cache)
                assert torch.equal(cache.key_table[:, 0, :, :reused], filled[i].key_table[:, 0, :, :reused])
        except BaseException as error:  # noqa: BLE001 (reported below, with its thread)
            errors.append((index, repr(error)))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        sys.setswitchinterval(switch)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    stats = prefix_cache.stats
    assert stats.requests == 8 * 40 and stats.evictions > 0 and stats.nbytes <= prefix_cache.max_bytes
    assert stats.nbytes == sum(len(b.tokens) for b in prefix_cache._recency) * token_bytes  # the books balance


@pytest.mark.parametrize("kwargs, error, message", [
    ({"max_bytes": 0}, ValueError, "max_bytes must be at least 1"),
    ({"max_bytes": 2.0**20}, TypeError, "max_bytes must be an int"),
    ({"max_bytes": 2**20, "block_size": 0}, ValueError, "block_size must be at least 1"),
    ({"max_bytes": 2**20, "block_size": True}, TypeError, "block_size must be an int"),
])
def test_bad_settings_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        PrefixCache(**kwargs)
