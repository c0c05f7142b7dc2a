"""Parity with Hugging Face: imported GPT-2 and Llama weights give the same logits (float32, 1e-4).

The Hugging Face models are built from random-init configs (nothing is downloaded), and every
weight is re-randomised so that no norm is the identity and no bias is zero.
"""
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from llmkit.model.transformer import Transformer  # noqa: E402
from llmkit.model.weights import from_hf, load, save  # noqa: E402

TOLERANCE = 1e-4

GPT2_SHAPES = {  # n_embd, n_layer, n_head, n_positions, vocab_size, tied, n_inner
    "small_tied": (48, 2, 4, 64, 120, True, None),
    "wide_heads_untied": (64, 3, 2, 40, 77, False, None),
    "narrow_inner": (32, 1, 8, 32, 50, True, 80),
}
LLAMA_SHAPES = {  # hidden, layers, heads, kv_heads, intermediate, positions, vocab, tied, bias, theta
    "gqa_untied": (48, 2, 6, 2, 100, 64, 120, False, False, 10000.0),
    "mha_tied": (32, 2, 4, 4, 64, 40, 90, True, False, 10000.0),
    "mqa_bias_theta": (64, 3, 4, 1, 96, 48, 70, False, True, 500000.0),
}


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                scale = 0.5 + torch.rand(p.shape, generator=generator) if name.endswith("weight") else 0.1
                p.copy_(scale if name.endswith("weight") else scale * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
    return model.eval()


def gpt2(shape) -> torch.nn.Module:
    d, layers, heads, positions, vocab, tied, inner = shape
    config = transformers.GPT2Config(n_embd=d, n_layer=layers, n_head=heads, n_positions=positions, vocab_size=vocab,
                                     n_inner=inner, tie_word_embeddings=tied, bos_token_id=None, eos_token_id=None)
    return randomize(transformers.GPT2LMHeadModel(config))


def llama(shape) -> torch.nn.Module:
    d, layers, heads, kv, inner, positions, vocab, tied, bias, theta = shape
    config = transformers.LlamaConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv, intermediate_size=inner, max_position_embeddings=positions,
                                      vocab_size=vocab, tie_word_embeddings=tied, attention_bias=bias, mlp_bias=bias,
                                      rope_theta=theta, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None,
                                      pad_token_id=None)
    return randomize(transformers.LlamaForCausalLM(config))


def max_difference(ours: Transformer, hf: torch.nn.Module, batch: int = 3) -> float:
    ids = torch.randint(0, hf.config.vocab_size, (batch, ours.config.context_length),
                        generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return (ours(ids) - hf(ids).logits).abs().max().item()


BUILDERS = [(gpt2, shape) for shape in GPT2_SHAPES.values()] + [(llama, shape) for shape in LLAMA_SHAPES.values()]
IDS = [f"gpt2-{k}" for k in GPT2_SHAPES] + [f"llama-{k}" for k in LLAMA_SHAPES]


@pytest.mark.parametrize("build, shape", BUILDERS, ids=IDS)
def test_import_from_a_model_object_matches_logits(build, shape):
    hf = build(shape)
    ours = from_hf(hf)
    tied = hf.config.tie_word_embeddings
    assert ours.config.tie_embeddings == tied and (ours.lm_head.weight is ours.embed.weight) == tied
    assert ours.num_params() == sum(p.numel() for p in hf.parameters())
    assert max_difference(ours, hf) <= TOLERANCE


@pytest.mark.parametrize("build, shape", BUILDERS, ids=IDS)
def test_import_from_a_saved_folder_matches_logits(build, shape, tmp_path):
    hf = build(shape)
    hf.save_pretrained(tmp_path)
    ours = from_hf(tmp_path)
    assert max_difference(ours, hf) <= TOLERANCE


def test_import_from_a_sharded_folder(tmp_path):
    hf = llama(LLAMA_SHAPES["mqa_bias_theta"])
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert max_difference(from_hf(tmp_path), hf) <= TOLERANCE


def test_the_comparison_can_fail():
    """Control: a different seed's weights are far outside the tolerance."""
    hf = gpt2(GPT2_SHAPES["small_tied"])
    other = from_hf(randomize(gpt2(GPT2_SHAPES["small_tied"]), seed=5))
    assert max_difference(other, hf) > 100 * TOLERANCE


def test_cached_decoding_of_an_imported_llama_matches_hugging_face():
    hf = llama(LLAMA_SHAPES["gqa_untied"])
    ours = from_hf(hf)
    ids = torch.randint(0, 120, (1, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(ids).logits
        cache = ours.new_cache()
        steps = [ours(ids[:, :5], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache) for t in range(5, 64)]
    assert (torch.cat(steps, dim=1) - expected).abs().max() <= TOLERANCE


def test_an_imported_model_saves_and_reloads_exactly(tmp_path):
    ours = from_hf(llama(LLAMA_SHAPES["mqa_bias_theta"]))
    save(ours, tmp_path)
    again = load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), again.state_dict().values()))


def test_unsupported_variants_are_refused_with_a_reason(tmp_path):
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=16, vocab_size=30,
                                     activation_function="relu", bos_token_id=None, eos_token_id=None)
    with pytest.raises(ValueError, match="activation_function='relu'"):
        from_hf(transformers.GPT2LMHeadModel(config))
    hf = llama(LLAMA_SHAPES["mha_tied"])
    hf.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="RoPE scaling"):
        from_hf(hf)
    with pytest.raises(ValueError, match="model_type 'bert'"):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
        from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ValueError, match="pickle"):
        from_hf(tmp_path)
