"""Weights laid out once for the CPU's matrix kernel: the linear layers of the server's passes.

A decode pass of a small model is mostly matrix products of a few rows (one per running request)
by each weight matrix. ``F.linear`` on a CPU hands the weight to MKL as it is stored; oneDNN, the
other kernel library inside PyTorch, can first *reorder* a weight into the blocked layout its
kernel streams fastest. Inference engines do that once, when they load the model ("prepacking"),
and so does the server: the engine packs every linear layer when it starts.

What it buys is largest where batching lives: ``python benchmarks/serve.py --steps-only --threads 1``
prints both side by side; in one run a pass of eight rows of the course's chat model took 9.9 ms
with ``F.linear`` and 6.7 ms packed, one row 5.7 and 5.6 ms. The product is the same sum
taken in another order, so results differ from ``F.linear`` in the last bits (the tests bound it),
and a row's result does not depend on how many rows share the pass (the tests check that too).

Packing copies the weights: a change made to the model's weights after the engine started is not
seen by it (start a new engine). Where packing is not available (a GPU, MPS, a CPU build without
oneDNN, weights not float32) ``packed_linear`` returns plain ``F.linear`` on the model's own weights.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F

Linear = Callable[[torch.Tensor], torch.Tensor]

ROWS_HINT = 8  # the batch size oneDNN tunes the layout for (a pass of any other size still works)


class PackedLinear:
    """``F.linear(x, weight, bias)`` with ``weight`` reordered once for oneDNN's CPU kernel."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        with torch.no_grad():
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)
            self.bias = bias.detach().clone() if bias is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # the kernel takes a matrix: any leading dims as rows
        out = torch.ops.mkldnn._linear_pointwise(rows, self.weight, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def can_pack(weight: torch.Tensor) -> bool:
    """Whether oneDNN can take this weight: float32, on the CPU, in a build that has oneDNN."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()


def packed_linear(weight: torch.Tensor, bias: torch.Tensor | None = None, *, pack: bool = True) -> Linear:
    """``x -> F.linear(x, weight, bias)``, packed for oneDNN where it can be (``can_pack``).

    A packed layer is checked once against ``F.linear`` on a random input; a build whose oneDNN
    refuses the weight, or disagrees beyond rounding, keeps the plain product."""
    plain = functools.partial(F.linear, weight=weight, bias=bias)
    if not (pack and can_pack(weight)):
        return plain
    try:
        packed = PackedLinear(weight, bias)
        probe = torch.randn(3, weight.size(1), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            agrees = torch.allclose(packed(probe), plain(probe), rtol=1e-4, atol=1e-4)
    except RuntimeError:  # an operator missing from this build
        return plain
    return packed if agrees else plain
