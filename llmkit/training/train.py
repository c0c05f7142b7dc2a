"""Pretraining: teach a Transformer to predict the next token of a corpus.

One step of training is: take a batch of token windows, run the model, measure how surprised it
was by each true next token (cross-entropy, in nats), and nudge every weight a little in the
direction that lowers that surprise (AdamW). Everything else in this file is care around that step:

- the learning rate warms up, then decays along a cosine, so early steps don't blow the weights up
  and late steps settle into a minimum;
- gradients are clipped to a maximum norm, so one odd batch cannot undo hours of progress;
- every so often the model is scored on held-out text it never trains on: the honest measure;
- checkpoints hold weights, optimizer moments, the step and the random-number state, so a run that
  stops can resume and end bit-for-bit where an uninterrupted run would have;
- the same code runs as N processes under ``torchrun`` (DistributedDataParallel): each process
  takes a slice of the global batch and the gradients are averaged, so the result equals one
  process with the whole batch.

The loop (``fit``) takes a function that returns the batch for a step and a loss over
``(logits, targets, mask)``, so fine-tuning (a mask on the assistant's tokens) reuses it unchanged.

    python -m llmkit train --config data/models/base/train_config.json
    torchrun --nproc_per_node=2 -m llmkit.training.train --config my_config.json
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as torch_dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from llmkit.training.data import Batch, TokenizedText, load_tokens, random_batch, sequential_batches
from llmkit.generation.generate import generate
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.generation.sampling import SamplingParams
from llmkit.tokens.tokenizer import Tokenizer


@dataclass
class TrainConfig:
    """Everything a run needs; a JSON file with these keys (and a "model" section) rebuilds it."""

    model: dict  # ModelConfig arguments plus "family": "llama" or "gpt2"; vocab_size comes from the tokenizer
    tokenizer: str = "data/models/base/tokenizer.json"
    train_corpus: str = "data/corpus/train.txt"
    heldout_corpus: str = "data/corpus/heldout.txt"
    out_dir: str = "runs/base"
    seed: int = 1337
    batch_size: int = 32  # global: sequences per optimizer step, summed over all processes
    max_steps: int = 1000
    learning_rate: float = 3e-3
    min_learning_rate: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    log_every: int = 10
    eval_every: int = 250
    checkpoint_every: int = 250
    sample_prompt: str = "ROMEO.\n"
    sample_tokens: int = 80
    sample_temperature: float = 0.8
    device: str = "auto"  # "auto", "cpu", "cuda", "mps"
    dtype: str = "float32"  # or "bfloat16": autocast the forward pass
    threads: int | None = None  # torch CPU threads per process; None leaves torch's default

    @classmethod
    def from_dict(cls, values: dict, source: str = "the config") -> TrainConfig:
        """Build and check a config; a wrong or missing key is named in the error."""
        fields = dataclasses.fields(cls)
        check_keys(values, [f.name for f in fields], source)
        missing = [f.name for f in fields if f.name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{source} lacks the key(s) {missing}" +
                             (" (the model's shape: d_model, n_layers, ...)" if "model" in missing else ""))
        cfg = cls(**values)
        cfg.betas = tuple(cfg.betas)
        cfg.validate(source)
        return cfg

    @classmethod
    def from_json(cls, path: str | Path, **overrides) -> TrainConfig:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist.")
        return cls.from_dict({**json.loads(path.read_text(encoding="utf-8")), **overrides}, source=str(path))

    def validate(self, source: str) -> None:
        """Fail now, not after minutes of tokenising, on values that cannot work."""
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be 'float32' or 'bfloat16', not {self.dtype!r} (in {source})")
        model_config(self.model, vocab_size=2, source=source)  # any vocab will do to check the shape

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values["betas"] = list(self.betas)
        return values


def check_keys(values: dict, known: list[str], where: str) -> None:
    """A clear error for the first key that is not in ``known``, with the nearest valid one."""
    for key in values:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            raise ValueError(f"unknown key {key!r} in {where}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                             + f" Valid keys: {', '.join(known)}.")


def model_config(section: dict, vocab_size: int, source: str = "the config") -> ModelConfig:
    """A ModelConfig from the config's "model" section: a family preset plus any overrides."""
    section = dict(section)
    family = section.pop("family", "llama")
    presets = {"llama": ModelConfig.llama, "gpt2": ModelConfig.gpt2}
    if family not in presets:
        raise ValueError(f"model family {family!r} in {source} is unknown; use 'llama' or 'gpt2'.")
    known = sorted(f.name for f in dataclasses.fields(ModelConfig) if f.name != "vocab_size")
    check_keys(section, known, f"the model section of {source}")
    try:
        return presets[family](vocab_size=vocab_size, **section)
    except TypeError as exc:  # a required key is missing
        raise ValueError(f"the model section of {source} is incomplete: {exc}") from None


# ------------------------------------------------------------------------------------ the pieces
def lm_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (nats per token) over the positions ``mask`` selects (all when None).

    Dividing by ``max(count, 1)`` makes a batch with nothing to learn from give a loss of 0 and
    zero gradients, never 0/0 = NaN.
    """
    nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    if mask is None:
        return nll.mean()
    weights = mask.flatten().to(nll.dtype)
    return (nll * weights).sum() / weights.sum().clamp(min=1)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices only.

    Decay pulls weights towards zero, a brake on memorising the training text. Norm gains and
    biases are single numbers per channel that set scales, not patterns; decaying them only hurts.
    """
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": cfg.weight_decay}, {"params": vectors, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=cfg.betas)


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to the peak, then a cosine down to ``min_learning_rate`` at ``max_steps``."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.min_learning_rate + cosine * (cfg.learning_rate - cfg.min_learning_rate)


def autocast(device: torch.device, dtype: str):
    """bfloat16 autocast for the forward pass, or nothing for float32."""
    if dtype == "float32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


@torch.no_grad()
def evaluate(model: Transformer, text: TokenizedText, *, batch_size: int = 16,
             dtype: str = "float32") -> dict[str, float]:
    """Score a tokenised text: mean loss in nats per token, and bits per byte.

    Bits per byte = total nats / ln 2 / bytes of text. Unlike loss per token it does not depend on
    the tokenizer, so models with different vocabularies can be compared on the same text.
    (To score part of a text, pass ``text.head(n_tokens, tokenizer)``.)
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total_nats, n_tokens = 0.0, 0
    for batch in sequential_batches(text.tokens, model.config.context_length, batch_size):
        batch = batch.to(device)
        with autocast(device, dtype):
            logits = model(batch.inputs)
        total_nats += F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten(), reduction="sum").item()
        n_tokens += batch.targets.numel()
    model.train(was_training)
    return {"loss": total_nats / n_tokens, "bpb": total_nats / math.log(2) / text.n_bytes, "tokens": n_tokens}


def sample_text(model: Transformer, tokenizer: Tokenizer, prompt: str, *, max_new_tokens: int = 80,
                temperature: float = 0.8, seed: int = 0) -> str:
    """The prompt and a seeded continuation, for watching a model learn.

    ``generate`` draws from a private seeded generator, so logging a sample never touches the
    global random state: the dropout masks of the following steps stay the same.
    """
    was_training = model.training
    model.eval()  # no dropout while writing
    generation = generate(model, tokenizer.encode(prompt), max_new_tokens=max_new_tokens, tokenizer=tokenizer,
                          sampling=SamplingParams(temperature=temperature), seed=seed,
                          stop_tokens=[tokenizer.special_tokens["<|endoftext|>"]])
    model.train(was_training)
    return prompt + generation.text


# ------------------------------------------------------------------------------ processes, devices
@dataclass
class Processes:
    """Where this process runs and which slice of the work it owns (rank 0 of 1 without torchrun)."""

    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(name: str = "auto") -> torch.device:
    """"auto" picks CUDA, then Apple's MPS, then the CPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} was asked for, but torch sees no CUDA GPU; use 'cpu' or 'auto'.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"device {name!r} was asked for, but MPS is not available here; use 'cpu' or 'auto'.")
    return device


def start_processes(device_name: str) -> Processes:
    """Join the process group when started by torchrun (it sets WORLD_SIZE); else run alone.

    GPUs talk through NCCL, one GPU per process; CPUs through gloo.
    """
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


def stop_processes(procs: Processes) -> None:
    if procs.world_size > 1:
        torch_dist.destroy_process_group()


# ------------------------------------------------------------------------------------ checkpoints
def _rng_states(procs: Processes) -> dict[str, torch.Tensor]:
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


def save_checkpoint(folder: Path, model: Transformer, optimizer: torch.optim.Optimizer, step: int,
                    procs: Processes) -> None:
    """Write model, optimizer moments, step and RNG states as safetensors + JSON (no pickle).

    All processes must call it (they share their RNG states); only the main one writes. The new
    checkpoint is written beside the old and swapped in, so a crash mid-write loses nothing.
    """
    rng = _rng_states(procs)
    if not procs.is_main:
        return
    optim_state = optimizer.state_dict()
    tensors = {f"state.{index}.{name}": value.detach().cpu().contiguous()
               for index, moments in optim_state["state"].items() for name, value in moments.items()}
    tensors.update(rng)
    fresh, old = folder.with_name(folder.name + ".new"), folder.with_name(folder.name + ".old")
    shutil.rmtree(fresh, ignore_errors=True)
    model.save(fresh)
    save_file(tensors, fresh / "optimizer.safetensors")
    state = {"step": step, "world_size": procs.world_size, "param_groups": optim_state["param_groups"]}
    (fresh / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
    if folder.exists():
        folder.rename(old)
    fresh.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, model: Transformer, optimizer: torch.optim.Optimizer, procs: Processes) -> dict:
    """Restore what ``save_checkpoint`` wrote, in place; returns the trainer state (step, ...)."""
    if not (folder / "trainer_state.json").is_file():
        raise FileNotFoundError(f"no checkpoint in {folder} to resume from; start without --resume.")
    state = json.loads((folder / "trainer_state.json").read_text())
    if state["world_size"] != procs.world_size:
        raise ValueError(f"the checkpoint in {folder} was written by {state['world_size']} process(es); "
                         f"resume with the same number (this run has {procs.world_size}).")
    model.load_state_dict(Transformer.load(folder, device=procs.device).state_dict())
    tensors = load_file(folder / "optimizer.safetensors")
    moments: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, index, name = key.split(".", 2)
            moments.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": moments, "param_groups": state["param_groups"]})
    torch.set_rng_state(tensors[f"rng.cpu.rank{procs.rank}"])
    if procs.device.type == "cuda":
        torch.cuda.set_rng_state(tensors[f"rng.cuda.rank{procs.rank}"], procs.device)
    return state


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
            kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                    if line and json.loads(line)["step"] <= step]
            self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def read_log(path: str | Path) -> list[dict]:
    """The records of a ``train_log.jsonl``."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


# --------------------------------------------------------------------------------------- the loop
LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def fit(model: Transformer, optimizer: torch.optim.Optimizer, batch_at: Callable[[int], Batch], cfg: TrainConfig,
        procs: Processes, *, start_step: int = 0, stop_after: int | None = None, loss_fn: LossFn = lm_loss,
        on_report: Callable[[int], dict] | None = None, on_checkpoint: Callable[[int], None] | None = None,
        log: TrainingLog | None = None, progress: bool = True) -> None:
    """Run optimizer steps ``start_step .. max_steps`` (or up to ``stop_after``).

    ``batch_at(step)`` gives the batch for a step: a function of the step rather than an iterator,
    so a resumed run sees exactly the batches it would have seen. ``on_report(step)`` runs on the
    main process every ``eval_every`` steps (held-out loss, samples) and returns figures for the
    progress bar; ``on_checkpoint(step)`` runs on every process every ``checkpoint_every`` steps
    and at the end. Neither counts against the tokens/s figure.
    """
    net = model
    if procs.world_size > 1:  # averages gradients across processes during backward()
        ids = [procs.device.index] if procs.device.type == "cuda" else None
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    end = cfg.max_steps if stop_after is None else min(stop_after, cfg.max_steps)
    tokens_per_step = cfg.batch_size * model.config.context_length
    bar = tqdm(total=cfg.max_steps, initial=start_step, desc="training", unit="step",
               disable=not (progress and procs.is_main), mininterval=1.0)
    loss_sum, steps_since_log, clock = torch.zeros((), device=procs.device), 0, time.perf_counter()
    shown: dict[str, str] = {}  # what the progress bar displays after it
    model.train()
    for step in range(start_step, end):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        batch = batch_at(step).to(procs.device)
        with autocast(procs.device, cfg.dtype):
            logits = net(batch.inputs)
        loss = loss_fn(logits, batch.targets, batch.mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        done = step + 1
        loss_sum += loss.detach()
        steps_since_log += 1
        bar.update(1)

        if done % cfg.log_every == 0 or done == end:
            if procs.world_size > 1:  # the loss of the global batch, for the log only
                torch_dist.all_reduce(loss_sum, op=torch_dist.ReduceOp.AVG)
            seconds = time.perf_counter() - clock
            mean_loss, speed = loss_sum.item() / steps_since_log, tokens_per_step * steps_since_log / seconds
            shown.update(loss=f"{mean_loss:.3f}", tok_per_s=f"{speed:,.0f}")
            bar.set_postfix(shown)
            if log is not None:
                log.write(kind="train", step=done, loss=round(mean_loss, 4),
                          lr=round(optimizer.param_groups[0]["lr"], 7), tokens_per_s=round(speed),
                          seconds=round(seconds, 2))
            loss_sum.zero_()
            steps_since_log = 0
            clock = time.perf_counter()
        paused = time.perf_counter()
        if on_report is not None and procs.is_main and (done % cfg.eval_every == 0 or done == cfg.max_steps):
            shown.update(on_report(done))
            bar.set_postfix(shown)
        if on_checkpoint is not None and (done % cfg.checkpoint_every == 0 or done == end):
            on_checkpoint(done)
        clock += time.perf_counter() - paused  # the pause doesn't count against tokens/s
    bar.close()


# --------------------------------------------------------------------------------- pretraining run
def train(cfg: TrainConfig, *, resume: bool = False, stop_after: int | None = None,
          progress: bool = True) -> Transformer:
    """Pretrain a model as ``cfg`` says; returns it (on every process).

    Writes into ``cfg.out_dir``: ``checkpoint/`` (to resume), ``train_log.jsonl`` and, when the
    last step is done, ``model/`` (config.json, model.safetensors, tokenizer.json): a folder that
    ``llmkit.load_model`` opens.
    """
    procs = start_processes(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out_dir = Path(cfg.out_dir)
    tokenizer = Tokenizer.load(cfg.tokenizer)
    train_text = load_tokens(cfg.train_corpus, cfg.tokenizer)
    heldout = load_tokens(cfg.heldout_corpus, cfg.tokenizer)

    torch.manual_seed(cfg.seed + procs.rank)  # DDP copies rank 0's initial weights; dropout differs per rank
    model = Transformer(model_config(cfg.model, tokenizer.vocab_size)).to(procs.device)
    optimizer = make_optimizer(model, cfg)
    log = TrainingLog(out_dir / "train_log.jsonl", enabled=procs.is_main)
    if procs.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "train_config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    def report(step: int) -> dict[str, str]:
        scores = evaluate(model, heldout, dtype=cfg.dtype)
        log.write(kind="eval", step=step, heldout_loss=round(scores["loss"], 4), heldout_bpb=round(scores["bpb"], 4))
        text = sample_text(model, tokenizer, cfg.sample_prompt, max_new_tokens=cfg.sample_tokens,
                           temperature=cfg.sample_temperature, seed=cfg.seed)
        log.write(kind="sample", step=step, text=text)
        return {"heldout_bpb": f"{scores['bpb']:.3f}"}

    start_step = 0
    if resume:
        start_step = load_checkpoint(out_dir / "checkpoint", model, optimizer, procs)["step"]
        log.truncate_after(start_step)
    elif procs.is_main:
        (out_dir / "train_log.jsonl").unlink(missing_ok=True)
        report(0)

    fit(model, optimizer,
        lambda step: random_batch(train_text.tokens, cfg.batch_size, model.config.context_length, seed=cfg.seed,
                                  step=step, rank=procs.rank, world_size=procs.world_size),
        cfg, procs, start_step=start_step, stop_after=stop_after, on_report=report, log=log, progress=progress,
        on_checkpoint=lambda step: save_checkpoint(out_dir / "checkpoint", model, optimizer, step, procs))

    finished = stop_after is None or stop_after >= cfg.max_steps
    if finished and procs.is_main:
        model.save(out_dir / "model")
        shutil.copyfile(cfg.tokenizer, out_dir / "model" / "tokenizer.json")
    stop_processes(procs)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llmkit train",
                                     description="Pretrain a Transformer on a text corpus.")
    parser.add_argument("--config", required=True, help="a JSON file of TrainConfig keys")
    parser.add_argument("--resume", action="store_true", help="continue from <out_dir>/checkpoint")
    parser.add_argument("--stop-after", type=int, help="stop after this step (a checkpoint is written)")
    parser.add_argument("--device", help="override the config: auto, cpu, cuda, mps")
    parser.add_argument("--dtype", help="override the config: float32 or bfloat16")
    parser.add_argument("--out-dir", help="override the config's out_dir")
    parser.add_argument("--threads", type=int, help="override the config: torch CPU threads per process")
    args = parser.parse_args(argv)
    overrides = {key: getattr(args, key) for key in ("device", "dtype", "out_dir", "threads")
                 if getattr(args, key) is not None}
    cfg = TrainConfig.from_json(args.config, **overrides)
    started = time.perf_counter()
    train(cfg, resume=args.resume, stop_after=args.stop_after)
    if int(os.environ.get("RANK", "0")) != 0:
        return
    evals = [r for r in read_log(Path(cfg.out_dir) / "train_log.jsonl") if r["kind"] == "eval"]
    if evals:
        print(f"step {evals[-1]['step']}: held-out {evals[-1]['heldout_loss']:.3f} nats/token, "
              f"{evals[-1]['heldout_bpb']:.3f} bits/byte; {(time.perf_counter() - started) / 60:.1f} min")
