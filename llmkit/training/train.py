"""Pretraining: teach a Transformer to predict the next token of a corpus.

The loop itself is ``llmkit.training.loop.fit``; this file brings what pretraining adds: the
corpus as token windows at random offsets, a held-out score in bits per byte, and a sample of
text every so often, so a reader can watch the model learn. Checkpoints hold weights, optimizer
moments, the step and the random-number state, so a run that stops can resume and end
bit-for-bit where an uninterrupted run would have; the same code runs as N processes under
``torchrun`` (see ``llmkit.training.distributed``).

    python -m llmkit train --config data/models/base/train_config.json
    torchrun --nproc_per_node=2 -m llmkit train --config my_config.json
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from llmkit.generation.generate import generate
from llmkit.generation.sampling import SamplingParams
from llmkit.model.config import ModelConfig
from llmkit.model.grow import grow, growable
from llmkit.model.transformer import Transformer
from llmkit.model.weights import load_model
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.training.checkpoint import TrainingLog, read_log
from llmkit.training.config import TrainConfig, model_config
from llmkit.training.data import (DOCUMENT_SEPARATOR, Batch, TokenizedText, encode_text, load_tokens, random_batch,
                                  repeated_spans, sequential_batches)
from llmkit.training.distributed import start_processes, stop_processes
from llmkit.training.loop import autocast, make_optimizer
from llmkit.training.run import Stage, run_stage


@torch.no_grad()
def bits_per_byte(model: Transformer, tokenizer: Tokenizer | None, text: str | TokenizedText, *,
                  batch_size: int = 16, dtype: str = "float32") -> dict[str, float]:
    """Score a text: ``{"bpb": bits per byte, "loss": nats per token, "tokens": tokens predicted}``.

    Bits per byte = total nats / ln 2 / bytes of text. Unlike loss per token it does not depend on
    the tokenizer, so models with different vocabularies can be compared on the same text. ``text``
    is a string (encoded with ``tokenizer``) or an already tokenised ``TokenizedText`` (then
    ``tokenizer`` may be None); to score part of one, pass ``text.head(n_tokens, tokenizer)``.
    """
    if isinstance(text, str):
        if tokenizer is None:
            raise TypeError("bits_per_byte needs the tokenizer to encode a string; pass the model's tokenizer")
        text = TokenizedText(None, encode_text(tokenizer, text), len(text.encode("utf-8")))
    if len(text.tokens) < 2:
        raise ValueError("bits_per_byte needs a text of at least two tokens: the first one is never predicted")
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


@torch.no_grad()
def copy_accuracy(model: Transformer, tokenizer: Tokenizer | None = None, *, rows: int = 16, span: int = 24,
                  seed: int = 12345, words: bool = False) -> float:
    """How often the model predicts the second saying of a random span exactly (greedy, per token).

    The spans are random ids, so nothing but copying from earlier in the context predicts them:
    this measures the "induction" circuit alone, a fixed probe that can be logged during training
    (it jumps from ~0 to near 1 when the circuit forms) and compared across models. With the
    model's ``tokenizer`` the spans use only ordinary ids and are separated by ``<|endoftext|>``,
    as the copy rows of training are. ``words`` (it needs the tokenizer) makes the spans words with a
    space after each (``repeated_spans``' ``word_separator``): copying across a space.
    """
    vocab_size, separator = copy_row_ids(tokenizer) if tokenizer is not None else (model.config.vocab_size, None)
    space = space_id(tokenizer) if words and tokenizer is not None else None
    if words and space is None:
        raise ValueError("copy_accuracy(words=True) needs a tokenizer whose space is one id")
    device = next(model.parameters()).device
    span = max(2, min(span, model.config.context_length // 4))  # a tiny model's window still holds two pairs
    length = min(model.config.context_length, 4 * span)
    batch = repeated_spans(rows, length, vocab_size, seed=seed, step=0,
                           span_lengths=(span, span), separator=separator, word_separator=space)
    was_training = model.training
    model.eval()
    predicted = model(batch.inputs.to(device)).argmax(-1).cpu()
    model.train(was_training)
    return float(((predicted == batch.targets) & batch.mask).sum() / batch.mask.sum())


def copy_words_by_place(model: Transformer, tokenizer: Tokenizer, *, rows: int = 32, span: int = 24,
                        seed: int = 12345) -> dict[str, float]:
    """Copy accuracy on word spans, split by where the predicted id stands: the first id of a word
    (it follows a space, so copying it needs the two ids before it), a space, an id inside a word.

    A model with only single-id induction copies the last two and fails the first: the space
    follows every word, so one id does not say which word comes next.
    """
    space = space_id(tokenizer)
    if space is None:
        raise ValueError("copy_words_by_place needs a tokenizer whose space is one id")
    vocab_size, separator = copy_row_ids(tokenizer)
    length = min(model.config.context_length, 4 * span)
    batch = repeated_spans(rows, length, vocab_size, seed=seed, step=0, span_lengths=(span, span),
                           separator=separator, word_separator=space)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        right = model(batch.inputs.to(next(model.parameters()).device)).argmax(-1).cpu() == batch.targets
    model.train(was_training)
    after, at = batch.inputs == space, batch.targets == space
    places = {"word_start": after, "space": at, "inside_word": ~after & ~at}
    return {name: float((right & where & batch.mask).sum() / (where & batch.mask).sum()) for name, where in places.items()}


def copy_row_ids(tokenizer: Tokenizer) -> tuple[int, int | None]:
    """For copy rows: how many ordinary ids there are (special ids come last) and ``<|endoftext|>``'s id."""
    ordinary = min(tokenizer.special_tokens.values(), default=tokenizer.vocab_size)
    return ordinary, tokenizer.special_tokens.get(DOCUMENT_SEPARATOR)


def space_id(tokenizer: Tokenizer) -> int | None:
    """The id of " " alone, or None when a space is not one token of its own."""
    ids = tokenizer.encode_ordinary(" ")
    return ids[0] if len(ids) == 1 else None


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


def train(cfg: TrainConfig, *, resume: bool = False, stop_after: int | None = None,
          progress: bool = True) -> Transformer:
    """Pretrain a model as ``cfg`` says; returns it (on every process).

    Writes into ``cfg.out_dir``: ``checkpoint/`` (to resume), ``train_log.jsonl``,
    ``train_config.json`` and, when the last step is done, ``model/`` for ``llmkit.load_model``.
    """
    procs = start_processes(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    tokenizer = Tokenizer.load(cfg.tokenizer)
    train_text = load_tokens(cfg.train_corpus, cfg.tokenizer)
    heldout = load_tokens(cfg.heldout_corpus, cfg.tokenizer)

    torch.manual_seed(cfg.seed + procs.rank)  # DDP copies rank 0's initial weights; dropout differs per rank
    model = Transformer(model_config(cfg.model, tokenizer.vocab_size)).to(procs.device)
    if cfg.grow_from and not resume:  # a resumed run's checkpoint already holds the grown weights
        model = grown_start(cfg.grow_from, model.config, tokenizer).to(procs.device)
    optimizer = make_optimizer(model, cfg)
    log = TrainingLog(Path(cfg.out_dir) / "train_log.jsonl", enabled=procs.is_main)

    ordinary, separator = copy_row_ids(tokenizer)
    space = space_id(tokenizer)
    if cfg.copy_word_share and space is None:
        raise ValueError(f"copy_word_share needs a tokenizer that writes a space as one id; {cfg.tokenizer} does not")

    def report(step: int) -> dict[str, str]:
        scores = bits_per_byte(model, tokenizer, heldout, dtype=cfg.dtype)
        copying = copy_accuracy(model, tokenizer)
        across_spaces = {"copy_words_accuracy": round(copy_accuracy(model, tokenizer, words=True), 4)} if space else {}
        log.write(kind="eval", step=step, heldout_loss=round(scores["loss"], 4), heldout_bpb=round(scores["bpb"], 4),
                  copy_accuracy=round(copying, 4), **across_spaces)
        if cfg.sample_tokens:  # 0: no samples (a run of copy practice alone writes nothing readable)
            text = sample_text(model, tokenizer, cfg.sample_prompt, max_new_tokens=cfg.sample_tokens,
                               temperature=cfg.sample_temperature, seed=cfg.seed)
            log.write(kind="sample", step=step, text=text)
        return {"heldout_bpb": f"{scores['bpb']:.3f}", "copy": f"{copying:.2f}"}

    def batch_at(step: int) -> Batch | list[Batch]:
        text_rows = cfg.batch_size - cfg.copy_rows
        if text_rows:
            text = random_batch(train_text.tokens, text_rows, model.config.context_length,
                                seed=cfg.seed, step=step, rank=procs.rank, world_size=procs.world_size)
        if not cfg.copy_rows:
            return text
        length = cfg.copy_row_length or model.config.context_length
        copies = repeated_spans(cfg.copy_rows * (model.config.context_length // length), length, ordinary,
                                seed=cfg.seed, step=step, separator=separator,
                                word_separator=space if cfg.copy_word_share else None, word_share=cfg.copy_word_share)
        mine = slice(procs.rank, None, procs.world_size)  # each process takes its share, like random_batch
        copies = Batch(copies.inputs[mine], copies.targets[mine], copies.mask[mine])
        return [text, copies] if text_rows else copies

    stage = Stage("train", batch_at, report, tokenizer_file=Path(cfg.tokenizer))
    finished = False
    try:
        trained = run_stage(stage, cfg, model, optimizer, procs, log, resume=resume, stop_after=stop_after,
                            progress=progress)
        finished = True
        return trained
    finally:
        stop_processes(procs, finished=finished)


def grown_start(folder: str, config: ModelConfig, tokenizer: Tokenizer) -> Transformer:
    """The model in ``folder``, grown to ``config``'s depth and window: where a run with ``grow_from`` starts."""
    small, small_tokenizer = load_model(folder)
    if small_tokenizer.vocab_size != tokenizer.vocab_size or small_tokenizer.special_tokens != tokenizer.special_tokens:
        raise ValueError(f"grow_from {folder!r} was trained with another tokenizer than this run's; "
                         f"grow from a model made with {tokenizer.vocab_size} ids and the same special tokens")
    problems = growable(small.config, config)
    if problems:
        raise ValueError(f"grow_from {folder!r} cannot grow into this run's model: " + "; ".join(problems))
    return grow(small, config.n_layers, config.context_length)


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
