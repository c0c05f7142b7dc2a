"""Export a model to a Hugging Face folder, the format the big engines read.

vLLM, TGI, ``transformers`` and llama.cpp's converter all start from the same folder::

    config.json              the architecture in Hugging Face's words (LlamaForCausalLM or GPT2LMHeadModel)
    generation_config.json   the ids that end a reply
    model.safetensors        the weights under Hugging Face's names
    tokenizer.json           the tokenizer for the ``tokenizers`` library (see llmkit.tokens.hf)
    tokenizer_config.json    its special tokens, and the chat template as Jinja (llmkit.tokens.hf_chat)

Our weights differ from Hugging Face's only in names and packing: we fuse the query, key and
value projections into one matrix (and SwiGLU's gate and up), and GPT-2's original code stores
its matrices transposed. ``hf_tensors`` undoes both; it is the exact inverse of the import in
``llmkit.model.weights.from_hf``, and a test holds the two together.

Run it as ``llmkit export --format hf chat exported/``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from llmkit.model.config import ModelConfig
from llmkit.model.transformer import Transformer
from llmkit.tokens.hf import tokenizer_config, tokenizer_json

STOP_MARKERS = ("<|end_turn|>", "<|endoftext|>", "<|end_tool_call|>")  # what ends a reply (chat.template.stop_tokens)


def export_hf(model: Transformer, tokenizer, directory: str | Path, *, force: bool = False) -> Path:
    """Write ``model`` and ``tokenizer`` as a Hugging Face folder at ``directory`` and return its path.

    The folder is built beside the target and renamed into place at the end, so a crash or an
    error never leaves half an export. A folder that already holds files is replaced only with
    ``force=True``.
    """
    directory = Path(directory)
    _check_target(directory, force)
    files = hf_files(model, tokenizer)  # every check runs before anything touches the disk
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
    try:
        for name, document in files["json"].items():
            (staging / name).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        save_file(files["tensors"], str(staging / "model.safetensors"), metadata={"format": "pt", "writer": "llmkit"})
        for path in staging.iterdir():  # mkdtemp and safetensors make private files; an export is meant to be shared
            os.chmod(path, 0o644)
        os.chmod(staging, 0o755)
        _move_into_place(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory


def hf_files(model: Transformer, tokenizer) -> dict[str, Any]:
    """Everything ``export_hf`` writes, in memory: ``{"json": {file name: document}, "tensors": {...}}``."""
    config = model.config
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model only {config.vocab_size} "
                         "embedding rows; export the tokenizer the model was trained with")
    special = tokenizer.special_tokens
    stops = [special[marker] for marker in STOP_MARKERS if marker in special]
    end = special.get("<|endoftext|>")
    generation = {"bos_token_id": None, "eos_token_id": stops or None, "pad_token_id": end}
    return {
        "json": {
            "config.json": hf_config(config, end_token_id=end, dtype=model.embed.weight.dtype),
            "generation_config.json": generation,
            "tokenizer.json": tokenizer_json(tokenizer),
            "tokenizer_config.json": tokenizer_config(tokenizer, model_max_length=config.context_length),
        },
        "tensors": hf_tensors(model),
    }


# --- the config ----------------------------------------------------------------------------------

def hf_config(config: ModelConfig, *, end_token_id: int | None = None,
              dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """``config.json`` for ``LlamaForCausalLM`` or ``GPT2LMHeadModel``, whichever family ``config`` is."""
    common = {"vocab_size": config.vocab_size, "tie_word_embeddings": config.tie_embeddings,
              "bos_token_id": None, "eos_token_id": end_token_id, "pad_token_id": end_token_id,
              "dtype": str(dtype).removeprefix("torch."), "use_cache": True}
    if config.family == "llama":
        rope = {"rope_type": "default", "rope_theta": config.rope_theta}
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "hidden_size": config.d_model, "intermediate_size": config.d_ff,
                "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
                "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim,
                "max_position_embeddings": config.context_length, "rms_norm_eps": config.norm_eps,
                "rope_theta": config.rope_theta, "rope_parameters": rope, "hidden_act": "silu",
                "attention_bias": config.bias, "mlp_bias": config.bias, "attention_dropout": config.dropout,
                **common}
    if config.family == "gpt2":
        if config.n_kv_heads != config.n_heads:
            raise ValueError(f"GPT-2 has no grouped-query attention, but this model has {config.n_kv_heads} "
                             f"key/value heads for {config.n_heads} query heads; only the Llama family exports that")
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "n_positions": config.context_length, "n_embd": config.d_model, "n_layer": config.n_layers,
                "n_head": config.n_heads, "n_inner": config.d_ff, "activation_function": "gelu_new",
                "layer_norm_epsilon": config.norm_eps, "resid_pdrop": config.dropout,
                "embd_pdrop": config.dropout, "attn_pdrop": config.dropout, "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, **common}
    raise ValueError(f"this model mixes the families (norm={config.norm!r}, mlp={config.mlp!r}, "
                     f"positions={config.positions!r}); Hugging Face has a class for GPT-2 "
                     "(layernorm, gelu, learned) and for Llama (rmsnorm, swiglu, rope) only")


# --- the weights ---------------------------------------------------------------------------------

def hf_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under Hugging Face's names, unfused (and transposed for GPT-2), each its own copy."""
    if model.config.family not in ("llama", "gpt2"):
        hf_config(model.config)  # raises the error that names what Hugging Face lacks
    ours = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    hf = _to_llama(model.config, ours) if model.config.family == "llama" else _to_gpt2(model.config, ours)
    if not model.config.tie_embeddings:
        hf["lm_head.weight"] = ours["lm_head.weight"]
    return {name: t.clone().contiguous() for name, t in hf.items()}  # safetensors refuses shared storage


def _to_llama(config: ModelConfig, ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    hf = {"model.embed_tokens.weight": ours["embed.weight"], "model.norm.weight": ours["norm.weight"]}
    q_width, kv_width = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    for i in range(config.n_layers):
        b, h = f"blocks.{i}.", f"model.layers.{i}."
        hf[h + "input_layernorm.weight"] = ours[b + "attn_norm.weight"]
        hf[h + "post_attention_layernorm.weight"] = ours[b + "mlp_norm.weight"]
        for p in ("weight", "bias") if config.bias else ("weight",):
            q, k, v = ours[f"{b}attn.qkv.{p}"].split((q_width, kv_width, kv_width))
            hf.update({f"{h}self_attn.q_proj.{p}": q, f"{h}self_attn.k_proj.{p}": k, f"{h}self_attn.v_proj.{p}": v})
            hf[f"{h}self_attn.o_proj.{p}"] = ours[f"{b}attn.out.{p}"]
            gate, up = ours[f"{b}mlp.gate_up.{p}"].chunk(2)
            hf.update({f"{h}mlp.gate_proj.{p}": gate, f"{h}mlp.up_proj.{p}": up})
            hf[f"{h}mlp.down_proj.{p}"] = ours[f"{b}mlp.down.{p}"]
    return hf


def _to_gpt2(config: ModelConfig, ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT-2's Conv1D stores (in, out), the transpose of a Linear. GPT-2 always has biases: a model
    trained without them gets zero biases, which compute exactly the same thing."""
    def bias(name: str, size: int) -> torch.Tensor:
        return ours.get(name, torch.zeros(size, dtype=ours["embed.weight"].dtype))

    d = config.d_model
    hf = {"transformer.wte.weight": ours["embed.weight"], "transformer.wpe.weight": ours["pos_embed.weight"],
          "transformer.ln_f.weight": ours["norm.weight"], "transformer.ln_f.bias": bias("norm.bias", d)}
    for i in range(config.n_layers):
        b, h = f"blocks.{i}.", f"transformer.h.{i}."
        for hf_name, our_name in (("ln_1", "attn_norm"), ("ln_2", "mlp_norm")):
            hf[f"{h}{hf_name}.weight"] = ours[f"{b}{our_name}.weight"]
            hf[f"{h}{hf_name}.bias"] = bias(f"{b}{our_name}.bias", d)
        for hf_name, our_name in (("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.out"),
                                  ("mlp.c_fc", "mlp.up"), ("mlp.c_proj", "mlp.down")):
            weight = ours[f"{b}{our_name}.weight"]
            hf[f"{h}{hf_name}.weight"] = weight.t()
            hf[f"{h}{hf_name}.bias"] = bias(f"{b}{our_name}.bias", weight.shape[0])
    return hf


# --- the folder ----------------------------------------------------------------------------------

def _check_target(directory: Path, force: bool) -> None:
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} is a file; give a folder to export into")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        raise FileExistsError(f"{directory} already holds files; choose an empty or new folder, or pass "
                              "force=True (--force) to replace it")


def _move_into_place(staging: Path, directory: Path) -> None:
    """Rename the finished folder onto ``directory``; an old one is moved aside first and removed last."""
    old = None
    if directory.is_dir() and any(directory.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".old", dir=directory.parent))
        os.replace(directory, old / directory.name)
    elif directory.is_dir():
        directory.rmdir()
    os.replace(staging, directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --- the command ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """``llmkit export --format hf MODEL DIR``: a shipped model ('base', 'chat') or a model folder."""
    from llmkit.model.weights import load_model

    parser = argparse.ArgumentParser(prog="llmkit export", description=main.__doc__)
    parser.add_argument("--format", choices=["hf"], default="hf", help="hf: a Hugging Face folder (the only format)")
    parser.add_argument("model", help="'base', 'chat' or a model folder (config.json, model.safetensors, tokenizer.json)")
    parser.add_argument("directory", help="the folder to write; it must be new or empty unless --force")
    parser.add_argument("--force", action="store_true", help="replace a folder that already holds files")
    args = parser.parse_args(argv)
    try:
        _check_target(Path(args.directory), args.force)
        model, tokenizer = load_model(args.model)
        path = export_hf(model, tokenizer, args.directory, force=args.force)
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        parser.exit(2, f"llmkit export: {err}\n")
    print(f"exported {args.model} to {path}/ (load it with transformers.AutoModelForCausalLM.from_pretrained)")
    return 0
