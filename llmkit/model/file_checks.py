"""Checks that a model folder is what it claims, before a single weight is allocated.

A ``config.json`` is a few bytes that decide how much memory a model takes: ``n_layers: 100000``
or ``context_length: 10**8`` would allocate gigabytes before any later check could run. So a
folder is checked in order of cost: the config's own rules, then the config against the tensor
names, shapes and dtypes in the safetensors *header* (read without loading the weights), then the
buffers the config would allocate beyond the weights, and only then are weights read (and checked
to be finite numbers).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import torch
from safetensors import SafetensorError, safe_open

from llmkit.model.config import ModelConfig

FLOAT_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
MAX_BUFFER_BYTES = 256 * 1024 * 1024  # RoPE tables beyond the weights themselves; ours take kilobytes
CONFIG_METADATA_KEY = "llmkit.config"  # the config a weights file was saved with, as JSON
DTYPE_METADATA_KEY = "llmkit.dtype"  # the dtype the model computed in, when it was stored in a narrower one


class Header:
    """A safetensors file's table of contents: tensor names, shapes and dtypes, and its metadata."""

    def __init__(self, path: Path):
        self.path = path
        try:
            with safe_open(str(path), framework="pt") as f:
                self.metadata: dict[str, str] = f.metadata() or {}
                self.shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
                self.dtypes = {name: f.get_slice(name).get_dtype() for name in f.keys()}
        except (SafetensorError, OSError, ValueError, RuntimeError) as err:
            raise ValueError(f"{path} could not be read as safetensors ({err}); the file is truncated or "
                             "corrupt: save or copy it again") from None

    def saved_config(self) -> dict | None:
        """The config stored inside the weights file by ``llmkit.model.weights.save``, if any."""
        text = self.metadata.get(CONFIG_METADATA_KEY)
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every stored tensor of ``Transformer(config)``, from the config alone.

    A tied LM head is not listed: it is stored once, as ``embed.weight``.
    """
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    norm = ("weight", "bias") if config.norm == "layernorm" and config.bias else ("weight",)
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (config.vocab_size, d)}
    if config.positions == "learned":
        shapes["pos_embed.weight"] = (config.context_length, d)
    mlp_in = ("gate_up", 2 * config.d_ff) if config.mlp == "swiglu" else ("up", config.d_ff)
    for i in range(config.n_layers):
        b = f"blocks.{i}."
        for name in ("attn_norm", "mlp_norm"):
            shapes.update({f"{b}{name}.{p}": (d,) for p in norm})
        for name, rows, cols in (("attn.qkv", d + 2 * kv, d), ("attn.out", d, d),
                                 (f"mlp.{mlp_in[0]}", mlp_in[1], d), ("mlp.down", d, config.d_ff)):
            shapes[f"{b}{name}.weight"] = (rows, cols)
            if config.bias:
                shapes[f"{b}{name}.bias"] = (rows,)
    shapes.update({f"norm.{p}": (d,) for p in norm})
    if not config.tie_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    return shapes


def shape_problems(expected: Mapping[str, tuple[int, ...]], found: Mapping[str, tuple[int, ...]]) -> list[str]:
    """Missing, unexpected and wrongly shaped tensors, as readable lines."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong_shape = [f"{name}: file {tuple(found[name])} vs config {tuple(shape)}"
                   for name, shape in expected.items() if name in found and tuple(found[name]) != tuple(shape)]
    problems = []
    if missing:
        problems.append(f"missing tensors {_first(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_first(unexpected)}")
    if wrong_shape:
        problems.append("wrong shapes: " + "; ".join(wrong_shape[:5]))
    return problems


def check_header(config: ModelConfig, header: Header, config_file: str) -> None:
    """Refuse a config that does not match the weights file, before anything is built."""
    if config.n_layers > len(header.shapes):  # cheap first: each layer stores several tensors
        raise ValueError(f"{config_file} says n_layers={config.n_layers}, but {header.path} holds only "
                         f"{len(header.shapes)} tensors; the config does not belong to these weights")
    problems = shape_problems(expected_shapes(config), header.shapes)
    if problems:
        raise ValueError(f"{header.path} does not match its config (a different model's {config_file}?): "
                         + "; ".join(problems))
    not_float = sorted(name for name, dtype in header.dtypes.items() if dtype not in FLOAT_DTYPES)
    if not_float:
        raise ValueError(f"{header.path} stores {_first(not_float)} as {header.dtypes[not_float[0]]}; model weights "
                         f"must be floating point ({', '.join(FLOAT_DTYPES)}). Convert them and save again")
    buffer_bytes = 2 * config.context_length * config.head_dim * 4 if config.positions == "rope" else 0
    weight_bytes = header.path.stat().st_size
    if buffer_bytes > max(MAX_BUFFER_BYTES, weight_bytes):
        raise ValueError(f"{config_file} asks for context_length={config.context_length:,}, whose RoPE tables "
                         f"would take {buffer_bytes / 2**30:.1f} GiB for a {weight_bytes / 2**20:.1f} MiB model; "
                         "lower context_length to what the model was trained for")


def check_finite(tensors: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """Refuse NaN or infinite weights: a model holding them answers nothing but NaN."""
    bad = [name for name, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"{source} holds NaN or infinite values in {_first(sorted(bad))}; the weights are "
                         "damaged (or training diverged): use an earlier checkpoint")


def _first(names: list[str], n: int = 5) -> str:
    return str(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")
