"""Run configs: every setting of a training run, checked up front, all problems in one message.

``RunConfig`` holds what every run shares (the optimizer, the schedule, how often to log, evaluate
and checkpoint, where it runs). ``TrainConfig`` adds the model shape and the corpus for
pretraining; ``FinetuneConfig`` adds the model to start from and the SFT/DPO knobs. A JSON file
with these keys rebuilds a config, and a wrong key, type or value is named before any minute of
tokenising or training is spent.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

from llmkit.checks import check_bool, check_int, check_number
from llmkit.files import read_limited
from llmkit.model.config import InvalidConfig, ModelConfig

C = TypeVar("C", bound="RunConfig")


@dataclass(kw_only=True)
class RunConfig:
    """The settings every training run shares; ``from_dict``/``from_json`` check them all at once."""

    out_dir: str = "runs/run"
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
    device: str = "auto"  # "auto", "cpu", "cuda", "mps"
    dtype: str = "float32"  # or "bfloat16": autocast the forward pass
    threads: int | None = None  # torch CPU threads per process; None leaves torch's default

    # settings a resumed run may change: they decide where and how visibly it runs, not what it computes
    RESUMABLE_CHANGES = ("out_dir", "device", "threads", "log_every", "eval_every", "checkpoint_every")

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        if isinstance(self.out_dir, os.PathLike):
            self.out_dir = str(self.out_dir)
        problems = self.problems()
        if problems:
            raise InvalidConfig(f"invalid {type(self).__name__}:\n  - " + "\n  - ".join(problems))

    def problems(self) -> list[str]:
        """Every wrong type or value, as one line each (subclasses add theirs)."""
        found: list[str] = []
        check = _collector(found)
        check(check_int, "seed", self.seed, minimum=0)
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every"):
            check(check_int, name, getattr(self, name), minimum=1)
        check(check_int, "warmup_steps", self.warmup_steps, minimum=0)
        check(check_number, "learning_rate", self.learning_rate, above=0.0, maximum=1.0)
        check(check_number, "min_learning_rate", self.min_learning_rate, minimum=0.0, maximum=1.0)
        if not found and self.min_learning_rate > self.learning_rate:
            found.append(f"min_learning_rate ({self.min_learning_rate}) must not exceed learning_rate "
                         f"({self.learning_rate}): the schedule decays from the peak to the minimum")
        check(check_number, "weight_decay", self.weight_decay, minimum=0.0)
        check(check_number, "grad_clip", self.grad_clip, above=0.0)
        if not (isinstance(self.betas, tuple) and len(self.betas) == 2):
            found.append(f"betas must be two numbers, got {self.betas!r}")
        else:
            for i, beta in enumerate(self.betas):
                check(check_number, f"betas[{i}]", beta, minimum=0.0)
                if isinstance(beta, (int, float)) and not beta < 1.0:
                    found.append(f"betas[{i}] must be below 1 (a moving average's decay), got {beta}")
        if not isinstance(self.out_dir, str) or not self.out_dir:
            found.append(f"out_dir must be a folder path, got {self.out_dir!r}")
        if self.dtype not in ("float32", "bfloat16"):
            found.append(f"dtype must be 'float32' or 'bfloat16', not {self.dtype!r}")
        found.extend(_device_problems(self.device))
        if self.threads is not None:
            check(check_int, "threads", self.threads, minimum=1)
        return found

    @classmethod
    def from_dict(cls: type[C], values: dict, source: str = "the config") -> C:
        """Build and check a config; a wrong or missing key is named, with ``source`` in the message."""
        if not isinstance(values, dict):
            raise InvalidConfig(f"{source} must be a JSON object of {cls.__name__} keys, got {type(values).__name__}")
        fields = dataclasses.fields(cls)
        check_keys(values, [f.name for f in fields], source)
        missing = [f.name for f in fields if f.name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise InvalidConfig(f"{source} lacks the key(s) {missing}" +
                                (" (the model's shape: d_model, n_layers, ...)" if "model" in missing else ""))
        try:
            return cls(**values)
        except InvalidConfig as err:
            raise InvalidConfig(f"{err} (in {source})") from None

    @classmethod
    def from_json(cls: type[C], path: str | Path, **overrides: Any) -> C:
        """Read a config file; ``overrides`` (command-line options) replace its keys."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist.")
        try:
            values = json.loads(read_limited(path, what="config file"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InvalidConfig(f"config file {path} is not valid JSON ({err})") from None
        if not isinstance(values, dict):
            raise InvalidConfig(f"config file {path} must hold a JSON object of {cls.__name__} keys")
        return cls.from_dict({**values, **overrides}, source=str(path))

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values["betas"] = list(self.betas)
        return values

    def changes_from(self, earlier: dict) -> list[str]:
        """The settings that differ from ``earlier`` (a saved ``to_dict``), beyond the resumable ones."""
        now = self.to_dict()
        return [f"{key}: {earlier.get(key)!r} -> {value!r}" for key, value in now.items()
                if key not in self.RESUMABLE_CHANGES and key in earlier and earlier[key] != value]


@dataclass(kw_only=True)
class TrainConfig(RunConfig):
    """Pretraining: a model shape (``model``: ModelConfig arguments plus "family") and a corpus."""

    model: dict  # ModelConfig arguments plus "family": "llama" or "gpt2"; vocab_size comes from the tokenizer
    tokenizer: str = "data/models/base/tokenizer.json"
    train_corpus: str = "data/corpus/train.txt"
    heldout_corpus: str = "data/corpus/heldout.txt"
    out_dir: str = "runs/base"
    sample_prompt: str = "ROMEO.\n"
    sample_tokens: int = 80
    sample_temperature: float = 0.8
    copy_rows: int = 0  # rows per batch of random spans said twice (``data.repeated_spans``): they build copying
    copy_row_length: int | None = None  # cut copy rows into rows this long (None: the window): fewer
    # earlier positions to search, so the copying circuit forms sooner; the tokens per step stay the same
    copy_word_share: float = 0.0  # the share of copy spans made of words (random ids, a space after each):
    # copying the id after a space needs the two ids before it, a circuit random spans never ask for
    grow_from: str | None = None  # a model folder to start from, grown to ``model``'s depth (``llmkit.model.grow``)

    RESUMABLE_CHANGES = (*RunConfig.RESUMABLE_CHANGES, "sample_prompt", "sample_tokens", "sample_temperature")

    def __post_init__(self) -> None:
        for name in ("tokenizer", "train_corpus", "heldout_corpus", "grow_from"):
            if isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, str(getattr(self, name)))
        super().__post_init__()

    def problems(self) -> list[str]:
        found = super().problems()
        check = _collector(found)
        for name in ("tokenizer", "train_corpus", "heldout_corpus", "sample_prompt"):
            if not isinstance(getattr(self, name), str):
                found.append(f"{name} must be a string, got {getattr(self, name)!r}")
        check(check_int, "sample_tokens", self.sample_tokens, minimum=0)
        check(check_number, "sample_temperature", self.sample_temperature, minimum=0.0)
        check(check_int, "copy_rows", self.copy_rows, minimum=0)
        if isinstance(self.copy_rows, int) and isinstance(self.batch_size, int) and self.copy_rows > self.batch_size:
            found.append(f"copy_rows ({self.copy_rows}) must be at most batch_size ({self.batch_size}): "
                         "the other rows are the corpus (all rows copy rows: a run of copy practice alone)")
        check(check_number, "copy_word_share", self.copy_word_share, minimum=0.0, maximum=1.0)
        if self.copy_row_length is not None:
            check(check_int, "copy_row_length", self.copy_row_length, minimum=2)
            window = self.model.get("context_length") if isinstance(self.model, dict) else None
            if isinstance(self.copy_row_length, int) and isinstance(window, int) and window % self.copy_row_length:
                found.append(f"copy_row_length ({self.copy_row_length}) must divide the model's context_length "
                             f"({window}): each copy row is cut into equal shorter rows")
        if self.grow_from is not None and not isinstance(self.grow_from, str):
            found.append(f"grow_from must be a model folder (a string) or null, got {self.grow_from!r}")
        if not isinstance(self.model, dict):
            found.append(f"model must be an object of ModelConfig keys, got {self.model!r}")
        else:
            try:
                model_config(self.model, vocab_size=2)  # any vocab will do to check the shape
            except ValueError as err:
                found.append(str(err))
        return found


@dataclass(kw_only=True)
class FinetuneConfig(RunConfig):
    """Fine-tuning: the model to start from and the SFT/DPO knobs; the examples are handed in."""

    base_model: str = "base"  # "base", "chat" (the shipped models) or a model folder
    heldout_examples: int = 96  # held-out conversations (or pairs) scored every eval_every steps
    dropout: float = 0.0  # 0.1 in sft_skills fit less and copied no better (data/experiments/dropout/)
    beta: float = 0.1  # DPO: how strongly rewards are measured against the reference
    sft_weight: float = 0.0  # DPO: weight of the chosen answers' own next-token loss (see DPOObjective)
    positive_weight: float = 0.0  # DPO-Positive: cost of the chosen answer falling below the reference (dpo_loss)
    length_groups: int = 1  # SFT: pad each batch in this many groups of similar length (same loss, less padding)
    out_dir: str = "runs/sft"
    batch_size: int = 16
    max_steps: int = 600
    learning_rate: float = 1e-3
    min_learning_rate: float = 1e-4
    warmup_steps: int = 30
    eval_every: int = 100
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        if isinstance(self.base_model, os.PathLike):
            self.base_model = str(self.base_model)
        super().__post_init__()

    def problems(self) -> list[str]:
        found = super().problems()
        check = _collector(found)
        if not isinstance(self.base_model, str) or not self.base_model:
            found.append(f"base_model must be 'base', 'chat' or a model folder, got {self.base_model!r}")
        check(check_int, "heldout_examples", self.heldout_examples, minimum=1)
        check(check_number, "dropout", self.dropout, minimum=0.0)
        if isinstance(self.dropout, (int, float)) and not self.dropout < 1.0:
            found.append(f"dropout must be below 1, got {self.dropout}")
        check(check_number, "beta", self.beta, above=0.0)
        check(check_number, "sft_weight", self.sft_weight, minimum=0.0)
        check(check_number, "positive_weight", self.positive_weight, minimum=0.0)
        check(check_int, "length_groups", self.length_groups, minimum=1)
        if isinstance(self.length_groups, int) and isinstance(self.batch_size, int) and self.length_groups > self.batch_size:
            found.append(f"length_groups ({self.length_groups}) cannot exceed batch_size ({self.batch_size})")
        return found


def _collector(found: list[str]) -> Callable[..., None]:
    """A ``check(...)`` that records a failed check's message instead of raising it."""
    def check(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            function(*args, **kwargs)
        except (TypeError, ValueError) as err:
            found.append(str(err))
    return check


def _device_problems(device: Any) -> list[str]:
    if not isinstance(device, str):
        return [f"device must be a string such as 'auto', 'cpu' or 'cuda', got {device!r}"]
    if device == "auto":
        return []
    try:
        torch.device(device)
    except RuntimeError:
        return [f"device {device!r} is not a device name; use 'auto', 'cpu', 'cuda', 'cuda:1' or 'mps'"]
    return []


def check_keys(values: dict, known: list[str], where: str) -> None:
    """A clear error for the first key that is not in ``known``, with the nearest valid one."""
    for key in values:
        if key not in known:
            hint = difflib.get_close_matches(str(key), known, n=1)
            raise InvalidConfig(f"unknown key {key!r} in {where}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                                + f" Valid keys: {', '.join(known)}.")


def model_config(section: dict, vocab_size: int, source: str = "the config") -> ModelConfig:
    """A ModelConfig from the config's "model" section: a family preset plus any overrides."""
    section = dict(section)
    family = section.pop("family", "llama")
    presets = {"llama": ModelConfig.llama, "gpt2": ModelConfig.gpt2}
    if family not in presets:
        raise InvalidConfig(f"model family {family!r} in {source} is unknown; use 'llama' or 'gpt2'.")
    known = sorted(f.name for f in dataclasses.fields(ModelConfig) if f.name != "vocab_size")
    check_keys(section, known, f"the model section of {source}")
    try:
        return presets[family](vocab_size=vocab_size, **section)
    except InvalidConfig as exc:
        raise InvalidConfig(f"the model section of {source}: {exc}") from None
    except TypeError as exc:  # a required key is missing
        raise InvalidConfig(f"the model section of {source} is incomplete: {exc}") from None


__all__ = ["FinetuneConfig", "InvalidConfig", "RunConfig", "TrainConfig", "check_keys", "model_config"]
