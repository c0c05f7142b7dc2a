"""The fast decode path (llmkit.model.fast) against the readable reference (llmkit.model.transformer):
equal bit for bit on random chunkings of random inputs, for both families, and chosen by generate
once per request by an explicit rule."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.generation import generate as generate_module
from llmkit.generation.generate import PrefixCache, generate, stream
from llmkit.model.fast import FastModel, fast_path, why_not_fast
from llmkit.model.transformer import Transformer
from tiny_configs import FAMILIES

MODELS = {}


def model_for(name: str) -> Transformer:
    if name not in MODELS:
        torch.manual_seed(0)
        model = Transformer(FAMILIES[name]).eval()
        with torch.no_grad():  # weights large enough that the logits are far from uniform
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 0.3)
        MODELS[name] = model
    return MODELS[name]


def run_in_chunks(runner, model: Transformer, ids: torch.Tensor, chunks: list[int]):
    """Logits of ``ids`` fed through a fresh KV cache chunk by chunk (a chunk of 1 is a decode step,
    taken through ``step``), and the cache."""
    cache, pieces, start = model.new_cache(batch_size=ids.size(0), max_length=sum(chunks)), [], 0
    for size in chunks:
        if size == 1:
            pieces.append(runner.step(ids[:, start], cache)[:, None])
        else:
            pieces.append(runner(ids[:, start:start + size], cache=cache))
        start += size
    return torch.cat(pieces, dim=1), cache


@pytest.mark.parametrize("name", list(FAMILIES))
@settings(max_examples=12, deadline=None)
@given(chunks=st.lists(st.integers(1, 9), min_size=1, max_size=8), batch=st.integers(1, 3), seed=st.integers(0, 99))
@torch.inference_mode()
def test_fast_path_equals_the_reference_bit_for_bit(name, chunks, batch, seed):
    """Prefills, decode steps and chunks after a cached prefix, in any order: same logits, same cache."""
    model = model_for(name)
    ids = torch.randint(0, model.config.vocab_size, (batch, sum(chunks)), generator=torch.Generator().manual_seed(seed))
    reference, reference_cache = run_in_chunks(model, model, ids, chunks)
    fast, fast_cache = run_in_chunks(fast_path(model), model, ids, chunks)
    assert torch.equal(fast, reference)
    assert fast_cache.length == reference_cache.length == ids.size(1)
    assert torch.equal(fast_cache.key_table, reference_cache.key_table)
    assert torch.equal(fast_cache.value_table, reference_cache.value_table)
    assert (reference - model(ids)).abs().max() < 1e-4  # and both agree with the cache-free forward


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("with_prefix_cache", [False, True])
def test_generate_gives_the_same_tokens_and_logits_on_either_path(name, with_prefix_cache):
    model = model_for(name)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 9, 10, 11, 12, 13], [5, 6, 7, 40, 41]]
    caches = {"fast": PrefixCache(2**22, block_size=4), "modules": PrefixCache(2**22, block_size=4)}
    for prompt in prompts:
        runs = {}
        for path, cache in caches.items():
            handle = model.register_forward_hook(lambda *args: None) if path == "modules" else None
            runs[path] = generate(model, prompt, max_new_tokens=12, keep_logits=True, num_samples=2,
                                  prefix_cache=cache if with_prefix_cache else None)
            if handle is not None:
                handle.remove()
        fast, modules = runs["fast"], runs["modules"]
        assert [s.tokens for s in fast.samples] == [s.tokens for s in modules.samples]
        assert all(torch.equal(a.logits, b.logits) for a, b in zip(fast.samples, modules.samples))
        assert fast.usage.cache_read_input_tokens == modules.usage.cache_read_input_tokens


# --- the rule ------------------------------------------------------------------------------------

def test_a_plain_model_in_eval_mode_takes_the_fast_path():
    assert why_not_fast(model_for("llama")) is None
    assert isinstance(fast_path(model_for("llama")), FastModel)


@pytest.mark.parametrize("change, reason", [
    (lambda m: m.train(), "training mode"),
    (lambda m: m.register_forward_hook(lambda *args: None), "module 'model' has a forward hook"),
    (lambda m: m.blocks[1].mlp.register_forward_pre_hook(lambda *args: None), "'blocks.1.mlp' has a forward hook"),
    (lambda m: torch.nn.modules.module.register_module_forward_hook(lambda *args: None), "global forward hook"),
    (lambda m: setattr(m.blocks[0].attn, "explicit", True), "explicit form"),
    (lambda m: setattr(m.blocks[0], "mlp", torch.nn.Sequential()), "Sequential"),
])
def test_the_modules_run_when_something_needs_them(change, reason):
    torch.manual_seed(0)
    model = Transformer(FAMILIES["gpt2"]).eval()
    handle = change(model)
    try:
        assert reason in why_not_fast(model) and fast_path(model) is None
    finally:
        if isinstance(handle, torch.utils.hooks.RemovableHandle):
            handle.remove()


def test_generate_chooses_the_path_once_per_request(monkeypatch):
    model, calls = model_for("gpt2"), []

    def counting(m):
        calls.append(m)
        return fast_path(m)

    monkeypatch.setattr(generate_module, "fast_path", counting)
    generate(model, [1, 2, 3], max_new_tokens=10)
    generate(model, [1, 2, 3], max_new_tokens=10, num_samples=3)
    assert calls == [model, model]
    generate(model, [1, 2, 3], max_new_tokens=10, use_cache=False)  # without a cache: always the modules
    assert len(calls) == 2


def test_a_hook_sees_every_step_and_one_added_mid_request_counts_from_the_next():
    model = model_for("llama")
    seen = []
    events = stream(model, [1, 2, 3], max_new_tokens=6)
    next(events)  # the request has started on the fast path
    handle = model.blocks[1].mlp.register_forward_hook(lambda module, args, output: seen.append(output.shape[1]))
    try:
        rest = list(events)
        assert seen == [] and rest[-1].usage.output_tokens == 6  # this request keeps its path
        generate(model, [1, 2, 3], max_new_tokens=6)
        assert seen == [3, 1, 1, 1, 1, 1]  # the next one runs the modules: the prefill, then 5 steps
    finally:
        handle.remove()


@torch.inference_mode()
def test_the_fast_path_reads_the_models_weights_without_copying():
    torch.manual_seed(0)
    model = Transformer(FAMILIES["llama"]).eval()
    fast, ids = fast_path(model), torch.tensor([[1, 2, 3, 4]])
    before = fast(ids, cache=model.new_cache())
    model.blocks[0].attn.qkv.weight.mul_(2.0)  # an in-place change after the FastModel was built
    after = fast(ids, cache=model.new_cache())
    assert not torch.equal(before, after) and torch.equal(after, model(ids, cache=model.new_cache()))


@torch.inference_mode()
def test_the_fast_path_checks_what_the_reference_checks():
    model = model_for("llama")
    fast, ids = fast_path(model), torch.tensor([[1, 2, 3, 4, 5]])
    cache = model.new_cache(max_length=5)
    fast(ids[:, :4], cache=cache)
    with pytest.raises(ValueError, match="batch of 2 sequences but the cache holds 1"):
        fast.step(torch.tensor([1, 2]), cache)
    with pytest.raises(ValueError, match=r"one new token per sequence, shape \(batch,\), got \(1, 2\)"):
        fast.step(ids[:, :2], cache)
    fast.step(ids[:, 4], cache)
    with pytest.raises(ValueError, match="cache full"):
        fast.step(ids[:, 0], cache)
    with pytest.raises(ValueError, match="token id 97 is outside"):
        fast(torch.tensor([[97, 1]]), cache=model.new_cache())
    with pytest.raises(TypeError, match="integer"):
        fast(torch.zeros(1, 3), cache=model.new_cache())
    assert cache.length == 5  # nothing was written by the refused calls
