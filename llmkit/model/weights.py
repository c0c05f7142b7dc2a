"""Model files: save and load our checkpoints, import Hugging Face ones, load the shipped models.

A checkpoint is a folder with two files, readable without Python pickle (which can run code):

    config.json          the ModelConfig, as JSON
    model.safetensors    every weight tensor by name (a tied LM head is stored once, as embed.weight)

A model may be stored in a narrower dtype than it computes in (the shipped models: bfloat16 on
disk, float32 in memory) only when that loses nothing: ``round_weights`` first, evaluate the
rounded model, then ``save(..., storage_dtype=torch.bfloat16)``; ``load`` widens the weights back
exactly, so the model that loads is the model that was evaluated.

Shipped models (``load_model("base")``) live in ``data/models/<name>/`` with a ``tokenizer.json``; a
bare name always means a shipped model, a path always a folder (``model_folder``).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from llmkit.files import atomic_write, fsync_file, read_limited
from llmkit.model.file_checks import (CONFIG_METADATA_KEY, DTYPE_METADATA_KEY, Header, check_finite, check_header,
                                      shape_problems)
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"


# --- our own checkpoints -------------------------------------------------------------------------

def round_weights(model: Transformer, dtype: torch.dtype = torch.bfloat16) -> Transformer:
    """Round every weight, in place, to the nearest value ``dtype`` holds; the model keeps its dtype.

    Storing in bfloat16 halves the file. Rounding is a change to the model, so it is done openly,
    before the evals, rather than hidden inside ``save``.
    """
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.to(dtype).to(tensor.dtype))
    return model


def _stored_as(tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    narrow = {name: t.to(dtype) for name, t in tensors.items()}
    lossy = [name for name, t in tensors.items() if not torch.equal(narrow[name].to(t.dtype), t)]
    if lossy:
        raise ValueError(f"{len(lossy)} tensors (first {lossy[0]}) are not exactly representable in {dtype}; "
                         f"call llmkit.model.weights.round_weights(model, {dtype}) first (and evaluate the "
                         "rounded model), or save without storage_dtype")
    return narrow


def save(model: Transformer, directory: str | Path, *, storage_dtype: torch.dtype | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``directory`` (created if needed).

    ``storage_dtype``: store the weights in this dtype (say ``torch.bfloat16``); refused unless it
    is lossless (see ``round_weights``). ``load`` gives the model back in the dtype it had here.

    Each file is written under a temporary name, flushed to disk and renamed into place, so a
    crash never leaves half a file. The weights file also carries the config in its metadata and
    is renamed first: a crash between the two renames leaves new weights beside an old
    ``config.json``, and ``load`` then uses the config saved with the weights.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config_text = json.dumps(model.config.to_dict(), indent=2) + "\n"
    tensors = {name: t.detach().cpu().contiguous() for name, t in _own_tensors(model).items()}
    metadata = {"format": "pt", "writer": "llmkit", CONFIG_METADATA_KEY: json.dumps(model.config.to_dict())}
    if storage_dtype is not None:
        metadata[DTYPE_METADATA_KEY] = str(tensors["embed.weight"].dtype).removeprefix("torch.")
        tensors = _stored_as(tensors, storage_dtype)
    partial = directory / f".{WEIGHTS_FILE}.partial"
    try:
        save_file(tensors, str(partial), metadata=metadata)
        fsync_file(partial)
        os.replace(partial, directory / WEIGHTS_FILE)
    finally:
        partial.unlink(missing_ok=True)
    atomic_write(directory / CONFIG_FILE, config_text)
    return directory


def load(directory: str | Path, device: torch.device | str | None = None) -> Transformer:
    """Read a folder written by ``save``; the model comes back in eval mode (dropout off).

    Everything that can be checked without the weights is checked first (see ``file_checks``),
    so a hostile or mismatched ``config.json`` fails fast instead of allocating gigabytes.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a folder; expected one holding {CONFIG_FILE} and {WEIGHTS_FILE}")
    weights_path = directory / WEIGHTS_FILE
    if not weights_path.is_file():
        if not (directory / CONFIG_FILE).exists():
            raise FileNotFoundError(f"{directory / CONFIG_FILE} is missing; a checkpoint folder needs "
                                    f"{CONFIG_FILE} and {WEIGHTS_FILE}")
        raise FileNotFoundError(f"{weights_path} is missing; a checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE}")
    header = Header(weights_path)
    config = _config_for(directory, header)
    tensors = _read_safetensors(weights_path)
    check_finite(tensors, weights_path)
    widened = _compute_dtype(header)  # a model stored narrower than it computed in widens back, exactly
    if widened is not None:
        tensors = {name: t.to(widened) if t.is_floating_point() else t for name, t in tensors.items()}
    model = Transformer(config)
    _copy_into(model, tensors, source=weights_path)
    return model.to(device).eval() if device is not None else model.eval()


def _compute_dtype(header: Header) -> torch.dtype | None:
    name = header.metadata.get(DTYPE_METADATA_KEY)
    if name is None:
        return None
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{header.path}: its metadata names the dtype {name!r}, which is not a torch floating "
                         "point dtype; the file was not written by llmkit.model.weights.save")
    return dtype


def _config_for(directory: Path, header: Header) -> ModelConfig:
    """The folder's ``config.json``, checked against the weights file's header.

    If it does not fit the weights but the config saved inside them does (what a crash between
    the two renames of ``save`` leaves behind), the saved one is used, with a warning.
    """
    config = read_config(directory)
    try:
        check_header(config, header, CONFIG_FILE)
        return config
    except ValueError:
        fallback = _saved_config_that_fits(header)
        if fallback is None:
            raise
    warnings.warn(f"{directory / CONFIG_FILE} does not fit {header.path}, but the config saved with the weights "
                  "does (an interrupted save?); using that one. Save the model again to repair the folder.",
                  stacklevel=3)
    return fallback


def _saved_config_that_fits(header: Header) -> ModelConfig | None:
    saved = header.saved_config()
    if saved is None:
        return None
    try:
        config = _parse_config(saved, header.path)
        check_header(config, header, f"the config inside {WEIGHTS_FILE}")
    except ValueError:
        return None
    return config


def read_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig in a model folder's ``config.json`` (a regular file of at most 1 MB)."""
    path = Path(directory) / CONFIG_FILE
    try:
        data = json.loads(read_limited(path, max_bytes=1 << 20, what="model config"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing; a checkpoint folder needs "
                                f"{CONFIG_FILE} and {WEIGHTS_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); the file is damaged: save the model again") from None
    if isinstance(data, dict) and "model_type" in data:
        raise ValueError(f"{path} is a Hugging Face config (model_type={data['model_type']!r}); "
                         "import that folder with llmkit.model.weights.from_hf(folder)")
    return _parse_config(data, path)


def _parse_config(data: Any, path: Path) -> ModelConfig:
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not describe a valid model: expected a JSON object of ModelConfig fields")
    try:
        return ModelConfig.from_dict(data)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path} does not describe a valid model: {err}") from None


def _own_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """The state dict without the tied LM head (the same tensor as ``embed.weight``)."""
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight")
    return state


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; a checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE}")
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(f"{path} could not be read as safetensors ({err}); the file is truncated or "
                         "corrupt: save or copy it again") from None


def _copy_into(model: Transformer, tensors: Mapping[str, torch.Tensor], source: Path | str) -> None:
    """Copy ``tensors`` into ``model`` after checking names, shapes, dtypes and values."""
    expected = {name: tuple(t.shape) for name, t in _own_tensors(model).items()}
    problems = shape_problems(expected, {name: tuple(t.shape) for name, t in tensors.items()})
    if problems:
        raise ValueError(f"{source} does not match its config (a different model's {CONFIG_FILE}?): "
                         + "; ".join(problems))
    not_float = sorted(name for name, t in tensors.items() if not t.is_floating_point())
    if not_float:
        raise ValueError(f"{source}: {not_float[:5]} are {tensors[not_float[0]].dtype}; model weights must be "
                         "floating point")
    check_finite(tensors, source)
    model.to(tensors["embed.weight"].dtype)  # a bf16 checkpoint gives a bf16 model
    model.load_state_dict(dict(tensors), strict=not model.config.tie_embeddings)


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

def model_folder(name_or_dir: str | Path) -> Path:
    """The folder of a model named as a shipped model or given as a path.

    The rule: a *string without a path separator* ("base", "chat") names a shipped model in
    ``data/models/``, even if the current folder happens to hold a folder of that name; anything
    else (a ``Path``, or a string such as "./base" or "runs/sft/model") is a folder. So a stray
    ``base/`` folder can never silently stand in for the shipped model.
    """
    if isinstance(name_or_dir, str) and _is_bare_name(name_or_dir):
        folder = data_path("models", name_or_dir, must_exist=False)
        if not folder.is_dir():
            shipped = sorted(p.name for p in folder.parent.iterdir() if p.is_dir()) if folder.parent.is_dir() else []
            raise FileNotFoundError(f"there is no shipped model named {name_or_dir!r} (shipped: {shipped}); "
                                    f"to load a folder of that name, pass a path such as './{name_or_dir}'")
        return folder
    if not isinstance(name_or_dir, (str, os.PathLike)):
        raise TypeError(f"pass 'base', 'chat' or a model folder, got {type(name_or_dir).__name__}")
    path = Path(name_or_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder; pass 'base', 'chat' or a model folder")
    return path


def _is_bare_name(text: str) -> bool:
    separators = [sep for sep in (os.sep, os.altsep, "/") if sep]
    return bool(text) and text not in (".", "..") and not any(sep in text for sep in separators)


def load_model(name_or_dir: str | Path = "base", device: torch.device | str | None = None) -> tuple[Transformer, Any]:
    """``(model, tokenizer)`` for a shipped model ("base", "chat": ``data/models/<name>/``) or any
    folder holding ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (see ``model_folder``
    for how a name and a path are told apart)."""
    from llmkit.tokens.tokenizer import Tokenizer  # floor 1, but only needed here

    directory = model_folder(name_or_dir)
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
