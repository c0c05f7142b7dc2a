"""Which device to compute on: "auto" picks a CUDA GPU, then Apple's GPU (MPS), then the CPU.

Every part of the package that places tensors (training, the environment check, a learner's own
script) asks here, so "auto" means the same thing everywhere and asking for a device this machine
does not have fails at once with a message saying what to use instead, not deep inside torch.
"""
from __future__ import annotations

import torch


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """``name`` ("auto", "cpu", "cuda", "cuda:1", "mps" or a ``torch.device``) as a device that exists here."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {str(name)!r} was asked for, but torch sees no CUDA GPU; use 'cpu' or 'auto'.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"device {str(name)!r} was asked for, but MPS is not available here; use 'cpu' or 'auto'.")
    return device
