"""Checkpoints survive a crash at any point of a save; resume finds the newest complete one, refuses
a changed config, and names damaged files; a diverging loss stops the run before anything is saved."""
import json
import math
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.model.weights import load, save
from llmkit.paths import data_path
from llmkit.training.checkpoint import (DamagedFile, TrainingLog, find_checkpoint, load_checkpoint, read_log,
                                        save_checkpoint)
from llmkit.training.config import RunConfig, TrainConfig
from llmkit.training.data import Batch
from llmkit.training.distributed import Processes
from llmkit.training.loop import TrainingDiverged, fit, lm_loss, make_optimizer
from llmkit.training.run import ResumeConflict
from llmkit.training.train import train

CPU = Processes(torch.device("cpu"))
SHAPE = dict(vocab_size=50, context_length=8, d_model=16, n_layers=1, n_heads=2)


def trained_pair(seed: int) -> tuple[Transformer, torch.optim.Optimizer]:
    """A tiny model and its optimizer after one step, so the optimizer holds moments."""
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.llama(**SHAPE))
    optimizer = make_optimizer(model, RunConfig())
    ids = torch.randint(0, 50, (2, 9))
    lm_loss(model(ids[:, :-1]), ids[:, 1:]).backward()
    optimizer.step()
    return model, optimizer


def same_weights(model: Transformer, other: Transformer) -> bool:
    return all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))


class CrashAt:
    """``os.replace`` that raises on its ``n``-th call, as if the process were killed there."""

    def __init__(self, n: int):
        self.n, self.calls, self.real = n, 0, os.replace

    def __call__(self, *args):
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt("killed")
        return self.real(*args)


def count_replaces(monkeypatch, action) -> int:
    counter = CrashAt(0)
    monkeypatch.setattr(os, "replace", counter)
    action()
    monkeypatch.undo()
    return counter.calls


def test_a_crash_at_every_rename_of_a_save_leaves_a_complete_checkpoint(tmp_path, monkeypatch):
    old_model, old_optimizer = trained_pair(0)
    new_model, new_optimizer = trained_pair(1)
    template = tmp_path / "template" / "checkpoint"
    save_checkpoint(template, old_model, old_optimizer, 3, CPU)
    scratch = tmp_path / "count" / "checkpoint"
    shutil.copytree(template.parent, scratch.parent)
    renames = count_replaces(monkeypatch, lambda: save_checkpoint(scratch, new_model, new_optimizer, 6, CPU))
    assert renames >= 5  # the weights, their config, the trainer state, then the two folder swaps

    for crash in range(1, renames + 1):
        folder = tmp_path / f"crash{crash}" / "checkpoint"
        shutil.copytree(template.parent, folder.parent)
        monkeypatch.setattr(os, "replace", CrashAt(crash))
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(folder, new_model, new_optimizer, 6, CPU)
        monkeypatch.undo()

        model, optimizer = trained_pair(2)
        state = load_checkpoint(folder, model, optimizer, CPU)
        assert state["step"] in (3, 6)
        assert same_weights(model, new_model if state["step"] == 6 else old_model)
        if crash == renames:  # the last rename done: only the new checkpoint can be found
            assert state["step"] == 6

        save_checkpoint(folder, new_model, new_optimizer, 9, CPU)  # the next save tidies up
        assert sorted(p.name for p in folder.parent.iterdir()) == ["checkpoint"]
        assert json.loads((folder / "trainer_state.json").read_text())["step"] == 9


def test_only_old_and_new_left_resumes_from_new(tmp_path):
    """A kill between the two folder renames: no ``checkpoint``, a complete ``.old`` and ``.new``."""
    model_a, optimizer_a = trained_pair(0)
    model_b, optimizer_b = trained_pair(1)
    save_checkpoint(tmp_path / "a" / "checkpoint", model_a, optimizer_a, 3, CPU)
    save_checkpoint(tmp_path / "b" / "checkpoint", model_b, optimizer_b, 6, CPU)
    shutil.move(tmp_path / "a" / "checkpoint", tmp_path / "checkpoint.old")
    shutil.move(tmp_path / "b" / "checkpoint", tmp_path / "checkpoint.new")
    assert find_checkpoint(tmp_path / "checkpoint") == tmp_path / "checkpoint.new"
    model, optimizer = trained_pair(2)
    assert load_checkpoint(tmp_path / "checkpoint", model, optimizer, CPU)["step"] == 6
    assert same_weights(model, model_b)


def test_a_crash_between_the_two_files_of_a_weights_save_still_loads_one_model(tmp_path, monkeypatch):
    small = Transformer(ModelConfig.llama(**SHAPE))
    bigger = Transformer(ModelConfig.llama(**{**SHAPE, "n_layers": 2}))
    save(small, tmp_path)
    monkeypatch.setattr(os, "replace", CrashAt(1))  # killed before the weights are renamed in
    with pytest.raises(KeyboardInterrupt):
        save(bigger, tmp_path)
    monkeypatch.undo()
    assert same_weights(load(tmp_path), small)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]  # no temp file left

    monkeypatch.setattr(os, "replace", CrashAt(2))  # killed after the weights, before config.json
    with pytest.raises(KeyboardInterrupt):
        save(bigger, tmp_path)
    monkeypatch.undo()
    assert json.loads((tmp_path / "config.json").read_text())["n_layers"] == 1  # the old config is still there
    with pytest.warns(UserWarning, match="interrupted save"):
        loaded = load(tmp_path)
    assert loaded.config.n_layers == 2 and same_weights(loaded, bigger)


# --------------------------------------------------------------------------------- damaged files
def test_damaged_checkpoint_files_are_named(tmp_path):
    model, optimizer = trained_pair(0)
    folder = tmp_path / "checkpoint"
    save_checkpoint(folder, model, optimizer, 3, CPU)
    (folder / "trainer_state.json").write_text('{"step": 3,')
    with pytest.raises(DamagedFile, match="checkpoint.*damaged"):
        load_checkpoint(folder, *trained_pair(1), CPU)

    save_checkpoint(tmp_path / "b" / "checkpoint", model, optimizer, 3, CPU)
    folder = tmp_path / "b" / "checkpoint"
    optimizer_file = folder / "optimizer.safetensors"
    optimizer_file.write_bytes(optimizer_file.read_bytes()[:100])
    with pytest.raises(DamagedFile, match=r"optimizer\.safetensors"):
        load_checkpoint(folder, *trained_pair(1), CPU)

    save_checkpoint(tmp_path / "c" / "checkpoint", model, optimizer, 3, CPU)
    folder = tmp_path / "c" / "checkpoint"
    tensors = load_file(folder / "optimizer.safetensors")
    del tensors["rng.cpu.rank0"]
    save_file(tensors, folder / "optimizer.safetensors")
    with pytest.raises(DamagedFile, match=r"rng\.cpu\.rank0"):
        load_checkpoint(folder, *trained_pair(1), CPU)


def test_no_checkpoint_says_start_without_resume(tmp_path):
    with pytest.raises(FileNotFoundError, match="without --resume"):
        load_checkpoint(tmp_path / "checkpoint", *trained_pair(0), CPU)


def test_damaged_log_lines_are_named_and_a_torn_last_line_is_dropped_on_resume(tmp_path):
    path = tmp_path / "train_log.jsonl"
    log = TrainingLog(path)
    for step in (1, 2, 3):
        log.write(kind="train", step=step, loss=1.0)
    with path.open("a") as f:
        f.write('{"kind": "train", "st')  # the line a killed run was writing
    with pytest.raises(DamagedFile, match=r"train_log\.jsonl, line 4"):
        read_log(path)
    log.truncate_after(2)
    assert [r["step"] for r in read_log(path)] == [1, 2]
    path.write_text('{"kind": "train", "step": 1}\nnot json\n{"kind": "train", "step": 2}\n')
    with pytest.raises(DamagedFile, match="line 2"):
        log.truncate_after(5)


# ------------------------------------------------------------------------------- divergence
def test_a_nan_loss_stops_the_run_before_the_next_checkpoint():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.llama(**SHAPE))
    cfg = RunConfig(max_steps=6, batch_size=2, log_every=10, checkpoint_every=1, warmup_steps=0)
    optimizer = make_optimizer(model, cfg)
    ids = torch.randint(0, 50, (2, 9))
    steps = iter(range(100))
    saved: list[int] = []

    def loss_fn(logits, targets, mask):
        return lm_loss(logits, targets) * (math.nan if next(steps) == 3 else 1.0)

    with pytest.raises(TrainingDiverged, match="step 4"):
        fit(model, optimizer, lambda step: Batch(ids[:, :-1], ids[:, 1:]), cfg, CPU, loss_fn=loss_fn,
            on_checkpoint=saved.append, progress=False)
    assert saved == [1, 2, 3]


# --------------------------------------------------------------------------------- resume rules
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    text = data_path("corpus", "heldout.txt").read_text(encoding="utf-8")
    (folder / "train.txt").write_text(text[:6_000], encoding="utf-8")
    (folder / "heldout.txt").write_text(text[20_000:21_000], encoding="utf-8")
    return folder


def tiny(corpus, out_dir, **changes) -> TrainConfig:
    values = dict(model={"family": "llama", "context_length": 16, "d_model": 16, "n_layers": 1, "n_heads": 2},
                  tokenizer=str(data_path("models", "base", "tokenizer.json")), out_dir=str(out_dir), seed=3,
                  batch_size=2, max_steps=4, warmup_steps=1, log_every=1, eval_every=4, checkpoint_every=2,
                  sample_tokens=2, device="cpu", train_corpus=str(corpus / "train.txt"),
                  heldout_corpus=str(corpus / "heldout.txt"))
    return TrainConfig.from_dict({**values, **changes})


def test_resume_refuses_a_changed_optimizer_and_accepts_a_changed_log_interval(corpus, tmp_path):
    train(tiny(corpus, tmp_path), stop_after=2, progress=False)
    saved_config = (tmp_path / "train_config.json").read_text()
    with pytest.raises(ResumeConflict, match=r"weight_decay: 0\.1 -> 0\.0.*betas"):
        train(tiny(corpus, tmp_path, weight_decay=0.0, betas=[0.8, 0.9]), resume=True, progress=False)
    assert (tmp_path / "train_config.json").read_text() == saved_config  # not overwritten by the refused run
    train(tiny(corpus, tmp_path, log_every=2), resume=True, progress=False)
    assert (tmp_path / "model" / "tokenizer.json").is_file()
    assert json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())["step"] == 4


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="SIGKILL is POSIX")
def test_kill_9_mid_run_then_resume_ends_where_an_uninterrupted_run_does(corpus, tmp_path):
    """A real kill at an arbitrary moment (often mid-save, with checkpoints every step)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    changes = dict(max_steps=48, checkpoint_every=1, log_every=1, eval_every=48)
    train(tiny(corpus, tmp_path / "whole", **changes), progress=False)
    config = tmp_path / "killed.json"
    config.write_text(json.dumps(tiny(corpus, tmp_path / "killed", **changes).to_dict()))
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "llmkit", "train", "--config", str(config)], env=env,
                               cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "killed" / "checkpoint" / "trainer_state.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        try:  # the folder is briefly renamed during each save
            if json.loads(state.read_text())["step"] >= 5:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    time.sleep(0.02)  # into the next step or save (a step of this model takes tens of ms; 43 are left)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert not (tmp_path / "killed" / "model").exists(), "the run finished before it could be killed"
    train(tiny(corpus, tmp_path / "killed", **changes), resume=True, progress=False)
    whole = load(tmp_path / "whole" / "model")
    assert same_weights(load(tmp_path / "killed" / "model"), whole)
    assert sorted(p.name for p in (tmp_path / "killed").iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
