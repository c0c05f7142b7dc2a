"""Model files: save and load our checkpoints, import Hugging Face ones, load the shipped models.

A checkpoint is a folder with two files, readable without Python pickle (which can run code):

    config.json          the ModelConfig, as JSON
    model.safetensors    every weight tensor by name (a tied LM head is stored once, as embed.weight)

Shipped models (``load_model("base")``) live in ``data/models/<name>/`` with a ``tokenizer.json``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"


# --- our own checkpoints -------------------------------------------------------------------------

def save(model: Transformer, directory: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")
    tensors = {name: t.detach().cpu().contiguous() for name, t in _own_tensors(model).items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt", "writer": "llmkit"})
    return directory


def load(directory: str | Path, device: torch.device | str | None = None) -> Transformer:
    """Read a folder written by ``save``; the model comes back in eval mode (dropout off)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a folder; expected one holding {CONFIG_FILE} and {WEIGHTS_FILE}")
    config = _read_config(directory / CONFIG_FILE)
    tensors = _read_safetensors(directory / WEIGHTS_FILE)
    model = Transformer(config)
    _copy_into(model, tensors, source=directory / WEIGHTS_FILE)
    return model.to(device).eval() if device is not None else model.eval()


def _own_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """The state dict without the tied LM head (the same tensor as ``embed.weight``)."""
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight")
    return state


def _read_config(path: Path) -> ModelConfig:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing; a checkpoint folder needs "
                                f"{CONFIG_FILE} and {WEIGHTS_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); the file is damaged: save the model again") from None
    if isinstance(data, dict) and "model_type" in data:
        raise ValueError(f"{path} is a Hugging Face config (model_type={data['model_type']!r}); "
                         "import that folder with Transformer.from_hf(folder)")
    try:
        return ModelConfig.from_dict(data)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path} does not describe a valid model: {err}") from None


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; a checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE}")
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(f"{path} could not be read as safetensors ({err}); the file is truncated or "
                         "corrupt: save or copy it again") from None


def _copy_into(model: Transformer, tensors: Mapping[str, torch.Tensor], source: Path | str) -> None:
    """Copy ``tensors`` into ``model`` after checking that names and shapes match exactly."""
    expected = _own_tensors(model)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong_shape = [f"{name}: file {tuple(tensors[name].shape)} vs config {tuple(t.shape)}"
                   for name, t in expected.items() if name in tensors and tensors[name].shape != t.shape]
    problems = []
    if missing:
        problems.append(f"missing tensors {_first(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_first(unexpected)}")
    if wrong_shape:
        problems.append("wrong shapes: " + "; ".join(wrong_shape[:5]))
    if problems:
        raise ValueError(f"{source} does not match its config (a different model's {CONFIG_FILE}?): "
                         + "; ".join(problems))
    model.to(tensors["embed.weight"].dtype)  # a bf16 checkpoint gives a bf16 model
    model.load_state_dict(dict(tensors), strict=not model.config.tie_embeddings)


def _first(names: list[str], n: int = 5) -> str:
    return str(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


# --- Hugging Face --------------------------------------------------------------------------------

def from_hf(model_or_dir: Any, device: torch.device | str | None = None) -> Transformer:
    """Import a Hugging Face ``GPT2LMHeadModel`` or ``LlamaForCausalLM``: the model object, or a
    folder it was saved to with ``save_pretrained`` (safetensors; read without transformers)."""
    is_folder = isinstance(model_or_dir, (str, Path))
    if is_folder:
        source = Path(model_or_dir)
        hf_config = _read_hf_config(source)
    elif hasattr(model_or_dir, "config") and hasattr(model_or_dir, "state_dict"):
        source = type(model_or_dir).__name__
        hf_config = model_or_dir.config.to_dict()
    else:
        raise TypeError(f"from_hf takes a Hugging Face model or a folder, got {type(model_or_dir).__name__}")
    converters = {"gpt2": _from_gpt2, "llama": _from_llama}
    model_type = hf_config.get("model_type")
    if model_type not in converters:
        raise ValueError(f"{source}: model_type {model_type!r} is not supported; llmkit imports {sorted(converters)}")
    hf_tensors = _read_hf_tensors(source) if is_folder else model_or_dir.state_dict()
    config, tensors = converters[model_type](hf_config, {k: v.detach() for k, v in hf_tensors.items()})
    model = Transformer(config)
    _copy_into(model, tensors, source=source)
    return model.to(device).eval() if device is not None else model.eval()


def _read_hf_config(folder: Path) -> dict[str, Any]:
    config_path = folder / CONFIG_FILE
    try:
        return json.loads(config_path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{config_path} is missing; is {folder} a Hugging Face model folder?") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_path} is not valid JSON ({err})") from None


def _read_hf_tensors(folder: Path) -> dict[str, torch.Tensor]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():  # large models are split into shards listed in an index
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        tensors: dict[str, torch.Tensor] = {}
        for shard in shards:
            tensors.update(_read_safetensors(folder / shard))
        return tensors
    if not (folder / WEIGHTS_FILE).is_file() and any(folder.glob("*.bin")):
        raise ValueError(f"{folder} holds only pickle (.bin) weights, which llmkit does not load; re-save it "
                         "with model.save_pretrained(folder, safe_serialization=True)")
    return _read_safetensors(folder / WEIGHTS_FILE)


def _require(hf_config: dict[str, Any], key: str, allowed: tuple[Any, ...]) -> None:
    if key in hf_config and hf_config[key] not in allowed:
        raise ValueError(f"Hugging Face config has {key}={hf_config[key]!r}; llmkit supports {list(allowed)}")


def _from_gpt2(c: dict[str, Any], hf: dict[str, torch.Tensor]) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    _require(c, "activation_function", ("gelu_new", "gelu_pytorch_tanh"))
    _require(c, "scale_attn_weights", (True,))
    _require(c, "scale_attn_by_inverse_layer_idx", (False,))
    config = ModelConfig.gpt2(vocab_size=c["vocab_size"], context_length=c["n_positions"], d_model=c["n_embd"],
                              n_layers=c["n_layer"], n_heads=c["n_head"], d_ff=c.get("n_inner") or 4 * c["n_embd"],
                              norm_eps=float(c.get("layer_norm_epsilon", 1e-5)),
                              tie_embeddings=bool(c.get("tie_word_embeddings", True)))
    hf = {k.removeprefix("transformer."): v for k, v in hf.items()
          if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # old checkpoints store the causal mask

    def take(name: str, transpose: bool = False) -> torch.Tensor:  # GPT-2's Conv1D stores (in, out)
        if name not in hf:
            raise ValueError(f"the GPT-2 weights have no tensor {name!r}")
        return hf.pop(name).t() if transpose else hf.pop(name)

    ours = {"embed.weight": take("wte.weight"), "pos_embed.weight": take("wpe.weight"),
            "norm.weight": take("ln_f.weight"), "norm.bias": take("ln_f.bias")}
    for i in range(config.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for hf_name, our_name in (("ln_1", "attn_norm"), ("ln_2", "mlp_norm")):
            for p in ("weight", "bias"):
                ours[f"{b}{our_name}.{p}"] = take(f"{h}{hf_name}.{p}")
        for hf_name, our_name in (("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.out"),
                                  ("mlp.c_fc", "mlp.up"), ("mlp.c_proj", "mlp.down")):
            ours[b + our_name + ".weight"] = take(h + hf_name + ".weight", transpose=True)
            ours[b + our_name + ".bias"] = take(h + hf_name + ".bias")
    _take_head(config, hf, ours)
    return config, ours


def _from_llama(c: dict[str, Any], hf: dict[str, torch.Tensor]) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    _require(c, "hidden_act", ("silu",))
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"Hugging Face config uses RoPE scaling {rope}; llmkit supports only plain RoPE")
    if c.get("attention_bias", False) != c.get("mlp_bias", False):
        raise ValueError("Hugging Face config has attention_bias != mlp_bias; llmkit has one bias switch for both")
    n_heads, d_model = c["num_attention_heads"], c["hidden_size"]
    if c.get("head_dim") not in (None, d_model // n_heads):
        raise ValueError(f"Hugging Face config has head_dim={c['head_dim']}; llmkit needs hidden_size / heads")
    config = ModelConfig.llama(vocab_size=c["vocab_size"], context_length=c["max_position_embeddings"],
                               d_model=d_model, n_layers=c["num_hidden_layers"], n_heads=n_heads,
                               n_kv_heads=c.get("num_key_value_heads") or n_heads, d_ff=c["intermediate_size"],
                               rope_theta=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                               norm_eps=float(c.get("rms_norm_eps", 1e-6)), bias=bool(c.get("attention_bias", False)),
                               tie_embeddings=bool(c.get("tie_word_embeddings", False)))

    def take(name: str) -> torch.Tensor:
        if name not in hf:
            raise ValueError(f"the Llama weights have no tensor {name!r}")
        return hf.pop(name)

    ours = {"embed.weight": take("model.embed_tokens.weight"), "norm.weight": take("model.norm.weight")}
    for i in range(config.n_layers):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        ours[b + "attn_norm.weight"] = take(h + "input_layernorm.weight")
        ours[b + "mlp_norm.weight"] = take(h + "post_attention_layernorm.weight")
        parameters = ("weight", "bias") if config.bias else ("weight",)
        for p in parameters:  # three projections become one fused matrix, and two become one
            ours[f"{b}attn.qkv.{p}"] = torch.cat([take(f"{h}self_attn.{x}_proj.{p}") for x in "qkv"])
            ours[f"{b}attn.out.{p}"] = take(f"{h}self_attn.o_proj.{p}")
            ours[f"{b}mlp.gate_up.{p}"] = torch.cat([take(f"{h}mlp.{x}_proj.{p}") for x in ("gate", "up")])
            ours[f"{b}mlp.down.{p}"] = take(f"{h}mlp.down_proj.{p}")
    _take_head(config, hf, ours)
    return config, ours


def _take_head(config: ModelConfig, hf: dict[str, torch.Tensor], ours: dict[str, torch.Tensor]) -> None:
    """Move the LM head across (untied models), then insist nothing was left behind."""
    head = hf.pop("lm_head.weight", None)
    if not config.tie_embeddings:
        if head is None:
            raise ValueError("the weights have no lm_head.weight but the config says the embeddings are untied")
        ours["lm_head.weight"] = head
    leftovers = [k for k in hf if not k.endswith("rotary_emb.inv_freq")]  # old Llama files store RoPE tables
    if leftovers:
        raise ValueError(f"tensors llmkit does not know how to import: {sorted(leftovers)[:5]}")


# --- shipped models ------------------------------------------------------------------------------

def load_model(name_or_dir: str | Path = "base", device: torch.device | str | None = None) -> tuple[Transformer, Any]:
    """``(model, tokenizer)`` for a shipped model ("base", "chat": ``data/models/<name>/``) or any
    folder holding ``config.json``, ``model.safetensors`` and ``tokenizer.json``."""
    from llmkit.tokens.tokenizer import Tokenizer  # floor 1, but only needed here

    path = Path(name_or_dir)
    if path.is_dir():
        directory = path
    elif len(path.parts) == 1:  # a bare name: one of the shipped models
        directory = data_path("models", path.name)
    else:
        raise FileNotFoundError(f"{path} is not a folder; pass 'base', 'chat' or a model folder")
    model = load(directory, device=device)
    tokenizer_path = directory / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise FileNotFoundError(f"{tokenizer_path} is missing; a model folder for load_model needs the "
                                "tokenizer the model was trained with")
    return model, Tokenizer.load(tokenizer_path)


def add_model_arguments(parser) -> None:
    """The options every command that runs a shipped model takes: which model, where, how many threads."""
    parser.add_argument("--model", default="chat", help="'base', 'chat' or a model folder")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or mps (default cpu)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")


def load_model_from_arguments(args) -> tuple[Transformer, Any]:
    """``load_model`` for the options of ``add_model_arguments`` (setting the thread count first)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return load_model(args.model, device=args.device)
