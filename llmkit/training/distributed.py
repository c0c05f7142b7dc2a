"""Where a run executes: one device, or N processes under ``torchrun`` that split each batch.

Under ``torchrun`` every process takes a slice of the global batch and DistributedDataParallel
averages the gradients during ``backward()``, so N processes compute what one process with the
whole batch would. GPUs talk through NCCL (one GPU per process), CPUs through gloo.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist

from llmkit.devices import resolve_device


@dataclass
class Processes:
    """Where this process runs and which slice of the work it owns (rank 0 of 1 without torchrun)."""

    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def start_processes(device_name: str) -> Processes:
    """Join the process group when started by torchrun (it sets WORLD_SIZE); else run alone."""
    device = resolve_device(device_name)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Processes(device)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    torch_dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Processes(device, rank, world_size)


def stop_processes(procs: Processes, *, finished: bool = True) -> None:
    """Leave the process group. After a finished run every process first waits for the others:
    otherwise one that is done early can tear its gloo connections down under a peer still using
    them, and the peer aborts ("terminate called without an active exception"). After an error there
    is no waiting, since the other processes may never arrive."""
    if procs.world_size > 1:
        if finished:
            torch_dist.barrier()
        torch_dist.destroy_process_group()


def wrap_model(model: torch.nn.Module, procs: Processes) -> torch.nn.Module:
    """The module to call in the training loop: DDP averages gradients across processes."""
    if procs.world_size == 1:
        return model
    ids = [procs.device.index] if procs.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def mean_over_processes(value: torch.Tensor, procs: Processes) -> torch.Tensor:
    """Average a tensor across processes in place (for the log only)."""
    if procs.world_size > 1:
        torch_dist.all_reduce(value, op=torch_dist.ReduceOp.AVG)
    return value


def rng_states(procs: Processes) -> dict[str, torch.Tensor]:
    """Every process's random-number state (it drives dropout), gathered as plain byte tensors."""
    mine = {"cpu": torch.get_rng_state()}
    if procs.device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(procs.device)
    if procs.world_size == 1:
        return {f"rng.{kind}.rank0": state for kind, state in mine.items()}
    states = {}
    for kind, state in mine.items():  # NCCL only moves GPU tensors, so gather on the device
        gathered = [torch.empty_like(state, device=procs.device) for _ in range(procs.world_size)]
        torch_dist.all_gather(gathered, state.to(procs.device))
        states.update({f"rng.{kind}.rank{r}": s.cpu() for r, s in enumerate(gathered)})
    return states
