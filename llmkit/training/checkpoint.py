"""Checkpoints and the training log: what a stopped run needs to resume, saved so a crash loses nothing.

A checkpoint folder holds the weights, the optimizer's moments, the step, every process's
random-number state and the run's config, as safetensors + JSON (never pickle). It is written
whole under a new name (``checkpoint.new``) and only then swapped in; ``trainer_state.json`` is
written last, so its presence marks a complete checkpoint. A kill at any moment leaves at least
one complete checkpoint, and ``find_checkpoint`` resumes from the newest complete one.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from llmkit.checks import is_int
from llmkit.files import atomic_copy, atomic_write, fsync_file, fsync_folder, read_limited
from llmkit.model.transformer import Transformer
from llmkit.model.weights import load as load_weights, save as save_weights
from llmkit.training.distributed import Processes, rng_states

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"


class DamagedFile(ValueError):
    """A checkpoint or log file that exists but cannot be read; the message names it."""


# ------------------------------------------------------------------------------ folders swapped whole
def _sibling(folder: Path, suffix: str) -> Path:
    return folder.with_name(folder.name + suffix)


def swap_in(fresh: Path, folder: Path) -> None:
    """Replace ``folder`` by the complete folder ``fresh``; until the last rename the old one stays."""
    old = _sibling(folder, ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(fresh, folder)
    fsync_folder(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def save_model_folder(model: Transformer, tokenizer_file: str | Path, folder: Path) -> Path:
    """A finished model folder (config.json, model.safetensors, tokenizer.json) for ``load_model``,
    written beside the target and swapped in whole."""
    fresh = _sibling(folder, ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    save_weights(model, fresh)
    atomic_copy(tokenizer_file, fresh / "tokenizer.json")
    swap_in(fresh, folder)
    return folder


# ----------------------------------------------------------------------------------- checkpoints
def save_checkpoint(folder: Path, model: Transformer, optimizer: torch.optim.Optimizer, step: int,
                    procs: Processes, config: dict | None = None) -> None:
    """Write model, optimizer moments, step, RNG states and ``config`` into ``folder``.

    All processes must call it (they share their RNG states); only the main one writes.
    """
    rng = rng_states(procs)
    if not procs.is_main:
        return
    _settle(folder)
    optim_state = optimizer.state_dict()
    tensors = {f"state.{index}.{name}": value.detach().cpu().contiguous()
               for index, moments in optim_state["state"].items() for name, value in moments.items()}
    tensors.update(rng)
    fresh = _sibling(folder, ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    save_weights(model, fresh)
    save_file(tensors, str(fresh / OPTIMIZER_FILE))
    fsync_file(fresh / OPTIMIZER_FILE)
    state = {"step": step, "world_size": procs.world_size, "param_groups": optim_state["param_groups"],
             "config": config}
    atomic_write(fresh / STATE_FILE, json.dumps(state, indent=2) + "\n")  # last: the folder is now whole
    swap_in(fresh, folder)


def _settle(folder: Path) -> None:
    """Finish what an interrupted save left: a complete ``.new`` takes the place of a missing
    folder; leftovers are removed only once ``folder`` itself is complete."""
    fresh, old = _sibling(folder, ".new"), _sibling(folder, ".old")
    if _step_of(folder) is None and _step_of(fresh) is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(fresh, folder)
        fsync_folder(folder.parent)
    if _step_of(folder) is not None:
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _step_of(folder: Path) -> int | None:
    """The step of a complete checkpoint folder, or None when it is absent, partial or damaged."""
    try:
        state = json.loads(read_limited(folder / STATE_FILE, what="trainer state"))
    except (OSError, ValueError):
        return None
    complete = all((folder / name).is_file() for name in ("config.json", "model.safetensors", OPTIMIZER_FILE))
    step = state.get("step") if isinstance(state, dict) else None
    return step if complete and is_int(step) else None


def find_checkpoint(folder: Path) -> Path:
    """The newest complete checkpoint among ``folder`` and what an interrupted save left beside it."""
    candidates = [path for path in (folder, _sibling(folder, ".new"), _sibling(folder, ".old"))
                  if _step_of(path) is not None]
    if candidates:
        return max(candidates, key=_step_of)  # max keeps the first of equals: ``folder`` itself
    if (folder / STATE_FILE).exists():
        raise DamagedFile(f"the checkpoint in {folder} is incomplete or damaged ({STATE_FILE} unreadable or "
                          "files missing) and no complete one is beside it; start again without --resume")
    raise FileNotFoundError(f"no checkpoint in {folder} to resume from; start without --resume.")


def load_checkpoint(folder: Path, model: Transformer, optimizer: torch.optim.Optimizer, procs: Processes) -> dict:
    """Restore the newest complete checkpoint at ``folder``, in place; returns its trainer state."""
    folder = find_checkpoint(folder)
    state = _read_state(folder)
    if state["world_size"] != procs.world_size:
        raise ValueError(f"the checkpoint in {folder} was written by {state['world_size']} process(es); "
                         f"resume with the same number (this run has {procs.world_size}).")
    model.load_state_dict(load_weights(folder, device=procs.device).state_dict())
    try:
        tensors = load_file(str(folder / OPTIMIZER_FILE))
    except (SafetensorError, OSError, ValueError) as err:
        raise DamagedFile(f"{folder / OPTIMIZER_FILE} cannot be read ({err}); the checkpoint is damaged") from None
    moments: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, index, name = key.split(".", 2)
            moments.setdefault(int(index), {})[name] = value
    try:
        optimizer.load_state_dict({"state": moments, "param_groups": state["param_groups"]})
    except (ValueError, KeyError, TypeError) as err:
        raise DamagedFile(f"the optimizer state in {folder} does not fit this model ({err}); "
                          "was it written for a different model?") from None
    for kind in ("cpu", "cuda") if procs.device.type == "cuda" else ("cpu",):
        key = f"rng.{kind}.rank{procs.rank}"
        if key not in tensors:
            raise DamagedFile(f"{folder / OPTIMIZER_FILE} lacks the random-number state {key!r}; the checkpoint "
                              "is damaged or was written on another kind of device")
        if kind == "cpu":
            torch.set_rng_state(tensors[key])
        else:
            torch.cuda.set_rng_state(tensors[key], procs.device)
    return {**state, "folder": folder}


def _read_state(folder: Path) -> dict:
    path = folder / STATE_FILE
    try:
        state = json.loads(read_limited(path, what="trainer state"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DamagedFile(f"{path} is not valid JSON ({err}); the checkpoint is damaged") from None
    needed = {"step": is_int, "world_size": is_int, "param_groups": lambda value: isinstance(value, list)}
    wrong = [key for key, valid in needed.items() if not (isinstance(state, dict) and valid(state.get(key)))]
    if wrong:
        raise DamagedFile(f"{path} lacks or garbles {wrong}; the checkpoint is damaged")
    return state


# ------------------------------------------------------------------------------------------- the log
class TrainingLog:
    """One JSON object per line: train loss, held-out scores and samples, each tagged with its step."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path, self.enabled = path, enabled

    def write(self, **record) -> None:
        if self.enabled:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def truncate_after(self, step: int) -> None:
        """On resume, drop what was logged after the checkpoint; those steps are about to rerun."""
        if self.enabled and self.path.exists():
            kept = [record for record in read_log(self.path, torn_tail_ok=True) if record["step"] <= step]
            atomic_write(self.path, "".join(json.dumps(record) + "\n" for record in kept))

    def clear(self) -> None:
        if self.enabled:
            self.path.unlink(missing_ok=True)


def read_log(path: str | Path, *, torn_tail_ok: bool = False) -> list[dict]:
    """The records of a ``train_log.jsonl``; a damaged line is named (path and line number).

    ``torn_tail_ok`` drops a last line without its newline: the line a killed run was writing.
    """
    path = Path(path)
    text = read_limited(path, max_bytes=1 << 30, what="training log").decode("utf-8", errors="replace")
    lines = text.split("\n")
    if torn_tail_ok and lines and lines[-1]:
        lines = lines[:-1]
    records = []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DamagedFile(f"{path}, line {number}, is not valid JSON ({err}); the log is damaged") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise DamagedFile(f"{path}, line {number}, is not a log record with a 'step'; the log is damaged")
        records.append(record)
    return records
