"""PrefixCache.load and store move keys and values between a request's KV cache and the block trie
exactly: what comes back is bit for bit what a prefill of those tokens wrote."""
import pytest
import torch

from llmkit.model import ModelConfig, Transformer
from llmkit.prefix_cache import PrefixCache

CONFIG = ModelConfig.llama(vocab_size=101, context_length=128, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2)


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(CONFIG).eval()


@pytest.mark.parametrize("batch", [1, 2])
@torch.inference_mode()
def test_a_loaded_prefix_is_exactly_what_the_prefill_wrote(model, batch):
    tokens = torch.randint(0, CONFIG.vocab_size, (50,), generator=torch.Generator().manual_seed(1)).tolist()
    prefilled = model.new_cache(max_length=64)
    model(torch.tensor([tokens]), cache=prefilled)
    prefix_cache = PrefixCache(max_bytes=2**24, block_size=16)
    prefix_cache.store(model, tokens, prefilled)
    assert prefix_cache.stats.blocks == 3  # 48 of the 50 tokens: whole blocks only

    cache = model.new_cache(batch_size=batch, max_length=64)
    cache.key_table.fill_(float("nan"))  # whatever is not loaded stays visibly unset
    assert prefix_cache.load(model, tokens + [7, 8], cache) == 48 and cache.length == 48
    for row in range(batch):
        assert torch.equal(cache.key_table[:, row, :, :48], prefilled.key_table[:, 0, :, :48])
        assert torch.equal(cache.value_table[:, row, :, :48], prefilled.value_table[:, 0, :, :48])
    assert cache.key_table[:, :, :, 48:].isnan().all()


@torch.inference_mode()
def test_continuing_after_a_loaded_prefix_equals_the_full_prefill(model):
    tokens = torch.randint(0, CONFIG.vocab_size, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    prefix_cache, full = PrefixCache(max_bytes=2**24, block_size=8), model.new_cache()
    expected = model(torch.tensor([tokens]), cache=full, last_only=True)
    prefix_cache.store(model, tokens, full)
    cache = model.new_cache()
    reused = prefix_cache.load(model, tokens, cache)
    assert reused == 32  # the last token is always prefilled, so the match stops at a block boundary before it
    logits = model(torch.tensor([tokens[reused:]]), cache=cache, last_only=True)
    assert (logits - expected).abs().max() < 1e-5
    assert not torch.equal(logits, model(torch.tensor([tokens[:-1] + [0]]), last_only=True))  # control
