"""Checkpoints: exact round trips without pickle, and clear errors for damaged or mismatched files."""
import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path
from llmkit.model.weights import load, load_model, round_weights, save

SHAPE = dict(vocab_size=61, context_length=32, d_model=32, n_layers=2, n_heads=4)
CONFIGS = {
    "gpt2": ModelConfig.gpt2(**SHAPE),
    "gpt2_untied": ModelConfig.gpt2(**SHAPE, tie_embeddings=False),
    "llama_gqa": ModelConfig.llama(**SHAPE, n_kv_heads=2),
    "llama_untied_bias": ModelConfig.llama(**SHAPE, tie_embeddings=False, bias=True, rope_theta=500000.0),
}


def make(config: ModelConfig) -> Transformer:
    torch.manual_seed(0)
    return Transformer(config).eval()


def ids_for(config: ModelConfig) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_save_then_load_is_exact(name, tmp_path):
    config = CONFIGS[name]
    model = make(config)
    save(model, tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "model.safetensors"]
    loaded = load(tmp_path / "ckpt")
    assert loaded.config == config and not loaded.training
    original, again = model.state_dict(), loaded.state_dict()
    assert original.keys() == again.keys()
    assert all(torch.equal(original[k], again[k]) and original[k].dtype == again[k].dtype for k in original)
    assert (loaded.lm_head.weight is loaded.embed.weight) == config.tie_embeddings
    with torch.no_grad():
        assert torch.equal(loaded(ids_for(config)), model(ids_for(config)))


def test_a_bf16_model_comes_back_in_bf16(tmp_path):
    model = make(CONFIGS["llama_gqa"]).to(torch.bfloat16)
    save(model, tmp_path)
    loaded = load(tmp_path)
    assert loaded.embed.weight.dtype == torch.bfloat16
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    with torch.no_grad():
        assert torch.equal(loaded(ids_for(CONFIGS["llama_gqa"])), model(ids_for(CONFIGS["llama_gqa"])))


@pytest.mark.parametrize("name", ["gpt2_untied", "llama_gqa"])
def test_a_float32_model_stored_in_bf16_loads_back_exactly_as_rounded(name, tmp_path):
    model = round_weights(make(CONFIGS[name]))
    assert model.embed.weight.dtype == torch.float32
    save(model, tmp_path / "narrow", storage_dtype=torch.bfloat16)
    save(model, tmp_path / "wide")
    stored = load_file(str(tmp_path / "narrow" / "model.safetensors"))
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    assert (tmp_path / "narrow" / "model.safetensors").stat().st_size < 0.6 * (tmp_path / "wide" / "model.safetensors").stat().st_size
    loaded = load(tmp_path / "narrow")
    assert loaded.embed.weight.dtype == torch.float32  # computes in the dtype it was evaluated in
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    with torch.no_grad():
        assert torch.equal(loaded(ids_for(CONFIGS[name])), model(ids_for(CONFIGS[name])))


def test_storing_in_bf16_without_rounding_first_is_refused_not_silently_lossy(tmp_path):
    model = make(CONFIGS["llama_gqa"])
    with pytest.raises(ValueError, match="round_weights"):
        save(model, tmp_path, storage_dtype=torch.bfloat16)
    assert not (tmp_path / "model.safetensors").exists()


def test_round_weights_moves_each_weight_at_most_half_a_bf16_step():
    model = make(CONFIGS["llama_gqa"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    round_weights(model)
    for name, value in model.state_dict().items():
        assert torch.equal(value, value.to(torch.bfloat16).float())
        assert torch.all((value - before[name]).abs() <= before[name].abs() * 2 ** -8 + 1e-30)


def test_the_files_are_json_and_safetensors(tmp_path):
    model = make(CONFIGS["gpt2"])
    save(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == CONFIGS["gpt2"].to_dict()
    tensors = load_file(tmp_path / "model.safetensors")  # a plain safetensors reader, no pickle
    assert "lm_head.weight" not in tensors  # the tied head is the embedding table, stored once
    assert torch.equal(tensors["embed.weight"], model.embed.weight)
    assert not any("rope" in name for name in tensors)  # recomputed, never stored


def test_load_honours_the_device_argument(tmp_path):
    save(make(CONFIGS["llama_gqa"]), tmp_path)
    model = load(tmp_path, device="cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_a_truncated_file_is_named(tmp_path):
    save(make(CONFIGS["gpt2"]), tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors.*truncated or corrupt"):
        load(tmp_path)


def test_a_garbage_file_is_named(tmp_path):
    save(make(CONFIGS["gpt2"]), tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x80\x04not a safetensors file at all")
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        load(tmp_path)


def without_saved_config(folder):
    """Rewrite the weights without the config ``save`` stores in them, as other writers do."""
    save_file(load_file(folder / "model.safetensors"), folder / "model.safetensors")


def test_config_that_does_not_match_the_tensors_is_named(tmp_path):
    save(make(CONFIGS["gpt2"]), tmp_path)
    without_saved_config(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "d_model": 64}))
    with pytest.raises(ValueError, match=r"model\.safetensors does not match its config.*embed\.weight: file \(61, 32\) vs config \(61, 64\)"):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layers": 3}))
    with pytest.raises(ValueError, match=r"missing tensors \['blocks\.2\."):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "tie_embeddings": False}))
    with pytest.raises(ValueError, match=r"missing tensors \['lm_head\.weight'\]"):
        load(tmp_path)


def test_extra_tensors_are_named(tmp_path):
    save(make(CONFIGS["gpt2"]), tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    save_file({**tensors, "surprise.weight": torch.zeros(2)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="unexpected tensors.*surprise.weight"):
        load(tmp_path)


def test_broken_or_missing_config_is_named(tmp_path):
    save(make(CONFIGS["gpt2"]), tmp_path)
    (tmp_path / "config.json").write_text('{"vocab_size": 61,')
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON"):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**CONFIGS["gpt2"].to_dict(), "d_model": 30}))
    with pytest.raises(ValueError, match=r"(?s)config\.json does not describe a valid model.*d_model \(30\)"):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32}))
    with pytest.raises(ValueError, match="from_hf"):
        load(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        load(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        load(tmp_path / "nowhere")


SHIPPED_TOKENIZER = data_path("models", "base", "tokenizer.json", must_exist=False)
SHIPPED_BASE = data_path("models", "base", "model.safetensors", must_exist=False)


@pytest.mark.skipif(not SHIPPED_TOKENIZER.is_file(), reason="the course tokenizer is not built yet")
def test_load_model_reads_a_folder_with_its_tokenizer(tmp_path):
    from llmkit.tokens.tokenizer import Tokenizer

    shipped = Tokenizer.load(SHIPPED_TOKENIZER)
    config = ModelConfig.llama(**{**SHAPE, "vocab_size": shipped.vocab_size}, n_kv_heads=2)
    folder = tmp_path / "my_model"
    save(make(config), folder)
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json is missing"):
        load_model(folder)
    shutil.copy(SHIPPED_TOKENIZER, folder / "tokenizer.json")
    model, tokenizer = load_model(folder, device="cpu")
    assert model.config == config and not model.training
    ids = torch.tensor([tokenizer.encode("hello world")])
    assert model(ids).shape == (1, ids.size(1), config.vocab_size)


@pytest.mark.skipif(not SHIPPED_BASE.is_file(), reason="the base model is not trained yet")
def test_the_shipped_base_model_loads():
    model, tokenizer = load_model("base")
    assert model.config.vocab_size >= tokenizer.vocab_size
    with torch.no_grad():
        logits = model(torch.tensor([tokenizer.encode("Once upon a time")]))
    assert torch.isfinite(logits).all()


def test_load_model_with_an_unknown_name_says_what_exists(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        load_model("no-such-model")
    with pytest.raises(FileNotFoundError, match="'base', 'chat' or a model folder"):
        load_model(tmp_path / "missing" / "folder")


# --------------------------------------------------------------------------------- hostile files
def rewrite_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("changes, message", [
    ({"d_model": 16384}, r"does not match its config"),
    ({"n_layers": 1000}, r"n_layers=1000, but .* holds only"),
    ({"n_layers": 100_000}, r"n_layers is 100,000, above the sane limit"),
    ({"context_length": 10**8}, r"context_length is 100,000,000, above the sane limit"),
    ({"vocab_size": 10**9, "d_model": 16384}, r"vocab_size is 1,000,000,000"),
])
def test_a_few_bytes_of_config_cannot_ask_for_gigabytes(tmp_path, changes, message):
    """Each would allocate gigabytes if built; the config is checked against bounds and the
    weights file's header (read without loading a weight) first."""
    save(make(CONFIGS["llama_gqa"]), tmp_path)
    without_saved_config(tmp_path)
    rewrite_config(tmp_path, **changes)
    with pytest.raises(ValueError, match=message):
        load(tmp_path)


def test_rope_tables_far_larger_than_the_model_are_refused(tmp_path):
    config = ModelConfig.llama(vocab_size=61, context_length=32, d_model=64, n_layers=1, n_heads=1)
    save(make(config), tmp_path)
    without_saved_config(tmp_path)
    rewrite_config(tmp_path, context_length=4_000_000)  # within the limit, but 2 GiB of cos/sin tables
    with pytest.raises(ValueError, match=r"RoPE tables would take .* GiB"):
        load(tmp_path)


def test_a_config_that_is_a_fifo_or_an_endless_device_does_not_hang(tmp_path):
    import threading

    save(make(CONFIGS["gpt2"]), tmp_path)
    (tmp_path / "config.json").unlink()
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "config.json")
    else:
        pytest.skip("no FIFOs on this platform")
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(_error_of(lambda: load(tmp_path))), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert outcome and "not a regular file" in outcome[0]
    (tmp_path / "config.json").unlink()
    if Path("/dev/zero").exists():
        (tmp_path / "config.json").symlink_to("/dev/zero")
        with pytest.raises(ValueError, match="not a regular file"):
            load(tmp_path)


def _error_of(action) -> str:
    try:
        action()
    except Exception as err:  # noqa: BLE001 - the test reads the message
        return str(err)
    return "no error"


@pytest.mark.parametrize("field, value", [("rope_theta", math.nan), ("norm_eps", math.inf), ("rope_theta", -1.0)])
def test_non_finite_config_numbers_are_named(tmp_path, field, value):
    save(make(CONFIGS["llama_gqa"]), tmp_path)
    rewrite_config(tmp_path, **{field: value})  # json writes NaN / Infinity, which Python's reader accepts
    with pytest.raises(ValueError, match=field):
        load(tmp_path)


def test_nan_weights_and_integer_tensors_are_named(tmp_path):
    save(make(CONFIGS["gpt2"]), tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    poisoned = tensors["blocks.1.mlp.up.weight"].clone()
    poisoned[0, 0] = math.nan
    save_file({**tensors, "blocks.1.mlp.up.weight": poisoned}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"NaN or infinite values in \['blocks\.1\.mlp\.up\.weight'\]"):
        load(tmp_path)
    as_ints = {name: t.to(torch.int64) for name, t in tensors.items()}
    save_file(as_ints, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="must be floating point"):
        load(tmp_path)


def test_the_shapes_the_loader_expects_are_the_models_own():
    from llmkit.model.file_checks import expected_shapes

    for config in CONFIGS.values():
        model = make(config)
        own = {name: tuple(t.shape) for name, t in model.state_dict().items()
               if not (config.tie_embeddings and name == "lm_head.weight")}
        assert expected_shapes(config) == own


# ------------------------------------------------------------------------------ names and folders
@pytest.mark.skipif(not SHIPPED_BASE.is_file(), reason="the base model is not trained yet")
def test_a_folder_named_base_does_not_shadow_the_shipped_model(tmp_path, monkeypatch):
    """Rule: a bare name ("base", "chat") is a shipped model; a path ("./base", a Path) is a folder."""
    from llmkit.tokens.tokenizer import Tokenizer

    shipped = load(SHIPPED_BASE.parent)
    impostor = ModelConfig.llama(**{**SHAPE, "vocab_size": Tokenizer.load(SHIPPED_TOKENIZER).vocab_size})
    save(make(impostor), tmp_path / "base")
    shutil.copy(SHIPPED_TOKENIZER, tmp_path / "base" / "tokenizer.json")
    monkeypatch.chdir(tmp_path)
    model, _ = load_model("base")
    assert model.config == shipped.config and all(torch.equal(a, b) for a, b in zip(
        model.state_dict().values(), shipped.state_dict().values()))
    for local in ("./base", Path("base"), tmp_path / "base"):
        assert load_model(local)[0].config == impostor
    with pytest.raises(FileNotFoundError, match=r"no shipped model named 'chatt'.*'\./chatt'"):
        load_model("chatt")
