"""Fine-tuning: turn the base model into a chat assistant (SFT), then nudge its preferences (DPO).

Both stages reuse the pretraining loop of ``llmkit.training.train`` unchanged (``fit``, the optimizer, the
learning-rate schedule, checkpoints, the log); only the data and the loss are new.

**Supervised fine-tuning (SFT).** The base model has only read Shakespeare. SFT shows it synthetic
conversations (``llmkit.course.conversations``) rendered with the chat template, and trains it to predict
*the assistant's tokens only*: thinking, text, tool calls and ``<|end_turn|>``. The template's mask
marks them. The user's words, the system prompt, tool definitions and tool results are read but
never supervised: we want a model that answers questions, not one that writes them. Conversations
of different lengths share a batch by padding: pad positions are masked, so they cost compute but
teach nothing.

**Direct preference optimisation (DPO).** A preference pair is a prompt with a *chosen* answer (call
the tool, say "I can't know") and a *rejected* one (invent a number). DPO raises the log-probability
of chosen over rejected, measured *relative to a frozen reference* (the SFT model)::

    reward(answer) = beta * (log p_policy(answer) - log p_reference(answer))
    loss = -log sigmoid(reward(chosen) - reward(rejected))

The reference keeps the policy from drifting far: it only gains by moving probability between
the two answers, not by forgetting everything else. With policy = reference every reward is 0 and
the loss is ln 2; the *implicit reward accuracy* is how often reward(chosen) > reward(rejected).

**Invented entities.** The synthetic data has few cities, names and words; a small model
memorises them instead of learning to copy. ``fresh_entities`` swaps some for invented ones.

    python -m llmkit finetune sft --config data/models/chat/sft_config.json
    python -m llmkit finetune sft --config data/models/chat/sft2_config.json
    python -m llmkit finetune dpo --config data/models/chat/dpo_config.json
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import json
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from llmkit.chat.template import marker_ids
from llmkit.course.conversations import (CITIES, NAMES, SYLLABLES, WEATHER_QUESTIONS, WEATHER_THINKING, Conversation, Preference,
                                  as_react, letters_conversation, make_conversations, make_preferences, pick_letter,
                                  repeat_conversation, strawberry_task, strawberry_tasks, weather_conversation, words)
from llmkit.training.data import Batch
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path
from llmkit.training.train import (Processes, TrainConfig, TrainingLog, fit, lm_loss, load_checkpoint, make_optimizer,
                          read_log, resolve_device, save_checkpoint)
from llmkit.model.weights import load_model


@dataclass
class FinetuneConfig(TrainConfig):
    """A ``TrainConfig`` whose model comes from ``base_model`` and whose data are conversations.

    ``data`` picks the examples: "chat" (``make_conversations``, optionally only ``kinds``) or
    "strawberry:<format>" (``strawberry_tasks``: direct, spelled, tool or spell). For DPO, the
    preference pairs of ``make_preferences`` (``kinds`` defaults to its PREFERENCE_KINDS).
    """

    model: dict = field(default_factory=dict)  # unused: the shape comes from base_model
    base_model: str = "data/models/base"  # a folder load_model opens (or "base", "chat")
    data: str = "chat"
    kinds: list[str] | None = None
    fresh_entities: float = 0.0  # fraction of training conversations about an invented city/name/word
    varied_entities: bool = False  # invent them from syllables over the whole alphabet (varied_syllable)
    corpus_entities: bool = False  # draw half of them from the corpus's words, token by token (CopyWords)
    heldout_examples: int = 96  # held-out conversations (or pairs) scored every eval_every steps
    dropout: float = 0.0  # synthetic data never repeats, so the base model's dropout only slows learning
    beta: float = 0.1  # DPO: how strongly rewards are measured against the reference
    sft_weight: float = 0.0  # DPO: weight of the chosen answers' own next-token loss (see DPOObjective)
    out_dir: str = "runs/sft"
    batch_size: int = 16
    max_steps: int = 600
    learning_rate: float = 1e-3
    min_learning_rate: float = 1e-4
    warmup_steps: int = 30
    eval_every: int = 100
    checkpoint_every: int = 100

    @classmethod
    def from_dict(cls, values: dict, source: str = "the config") -> FinetuneConfig:
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                hint = difflib.get_close_matches(key, known, n=1)
                raise ValueError(f"unknown key {key!r} in {source}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                                 + f" Valid keys: {', '.join(known)}.")
        cfg = cls(**values)
        cfg.betas = tuple(cfg.betas)
        if cfg.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be 'float32' or 'bfloat16', not {cfg.dtype!r}")
        example_source(cfg.data, cfg.kinds, cfg.fresh_entities)  # fail now on an unknown data source
        return cfg


# ------------------------------------------------------------------------------------------ data
def example_source(data: str, kinds=None, fresh: float = 0.0, varied: bool = False,
                   fits: Callable[[Conversation], bool] | None = None,
                   lexicon: CopyWords | None = None) -> Callable[[int, str, int], list[Conversation]]:
    """``(n, split, seed) -> conversations`` for a config's ``data`` string.

    ``fresh``: the fraction of training conversations whose city, name or word is replaced by a
    freshly invented one (see ``with_fresh_entity``); held-out conversations are never changed.
    ``varied``: invent them from syllables over the whole alphabet (see ``varied_syllable``).
    ``lexicon``: draw half of the invented values from it instead (see ``CopyWords``).
    A longer invented name can push a conversation past the context: where ``fits`` says it
    does not fit, the original conversation is kept.
    """
    if data == "chat":
        def chat(n: int, split: str, seed: int) -> list[Conversation]:
            # kinds take turns from the first one, so a batch smaller than the list would never
            # reach its tail: start each seed (each step) at a different kind
            turns = None if kinds is None else [*kinds[seed % len(kinds):], *kinds[:seed % len(kinds)]]
            conversations = make_conversations(n, split=split, seed=seed, kinds=turns)
            if split != "train" or not fresh:
                return conversations
            rng = random.Random(f"llmkit-fresh|{seed}")
            changed = [with_fresh_entity(c, rng, varied, lexicon) if rng.random() < fresh else c for c in conversations]
            return [new if new is old or fits is None or fits(new) else old for new, old in zip(changed, conversations)]
        return chat
    if data.startswith("strawberry:"):
        fmt = data.split(":", 1)[1]
        strawberry_tasks(fmt, n=0)  # raises a clear error on an unknown format

        def tasks(n: int, split: str, seed: int) -> list[Conversation]:
            items = strawberry_tasks(fmt, split=split, seed=seed, n=n)
            if split != "train" or not fresh:
                return items
            rng = random.Random(f"llmkit-fresh-strawberry|{seed}")
            fresh_items = []
            for item in items:
                if rng.random() < fresh:
                    word = _invent(rng, (2, 8), _heldout_values(), False)
                    invented = strawberry_task(fmt, "train", word, pick_letter(rng, word), rng)
                    item = invented if fits is None or fits(invented) else item
                fresh_items.append(item)
            return fresh_items
        return tasks
    raise ValueError(f"data must be 'chat' or 'strawberry:<direct|spelled|tool|spell>', got {data!r}")


ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
          "br", "ch", "cl", "dr", "fl", "gr", "kr", "ph", "pl", "qu", "sh", "sk", "st", "th", "tr", "v"]
NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "ie", "oa", "ou", "y"]
CODAS = ["", "", "", "", "n", "r", "l", "s", "t", "m", "x", "k", "nd", "rt", "sh", "v"]


def varied_syllable(rng: random.Random) -> str:
    """One random syllable (onset + vowel + coda) over the whole alphabet.

    Invented names built from a short fixed syllable list are made of the same few dozen tokens,
    so a model can learn to reproduce *those tokens* without learning to copy in general, and
    then fails on a real held-out name like "Dev" (it answered "De"). Thousands of different
    syllables tokenize into hundreds of different pieces: copying is then the only way to win.
    """
    return rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)


class CopyWords:
    """The corpus's words, indexed by the tokens they are made of, to draw names for copying practice.

    Copying a name is an induction step per token ("after the earlier ' V' came 'iol'"), and a
    small model only copies tokens it has practised copying. Invented syllables re-tokenize into
    the few hundred common pieces, and the SFT stage-7 model kept missing names such as "Anya",
    "Zoe" and "Viola" at one such unpractised token (' An', 'oe', 'iol'). ``draw`` picks a *token*
    first, uniformly, then a capitalised corpus word that contains it, so a rare token is practised
    as often as a common one. Held-out values (``taken``) are never drawn.
    """

    def __init__(self, tokenizer, text: str, taken: set[str]):
        # compared without case: a word is drawn capitalised for a name and lower-cased for a
        # letter-counting question, and neither form may be a held-out value
        folded = {value.lower() for value in taken}
        found = {w.capitalize() for w in re.findall(r"[A-Za-z]{3,10}", text) if w.lower() not in folded}
        index: dict[int, list[str]] = {}
        for word in sorted(found):
            for token in set(tokenizer.encode_ordinary(" " + word)):
                index.setdefault(token, []).append(word)
        self.index = index
        self.tokens = sorted(index)

    @classmethod
    def for_corpus(cls, tokenizer) -> CopyWords:
        """The words of the course corpus (``data/corpus/train.txt``), never a held-out value."""
        return cls(tokenizer, data_path("corpus", "train.txt").read_text(encoding="utf-8"), _heldout_values())

    def draw(self, rng: random.Random) -> str:
        """A capitalised word holding a token drawn uniformly from every token the words use."""
        return rng.choice(self.index[rng.choice(self.tokens)])


def _invent(rng: random.Random, syllables: tuple[int, int], taken: set[str], capital: bool,
            varied: bool = False, lexicon: CopyWords | None = None) -> str:
    """A made-up word of ``syllables`` (low, high) syllables that is not in ``taken``; ``varied``
    draws syllables over the whole alphabet (``varied_syllable``), else from ``SYLLABLES``; with
    ``lexicon``, half of the words are instead drawn from it (``CopyWords``)."""
    if lexicon is not None and rng.random() < 0.5:
        word = lexicon.draw(rng)
        return word if capital else word.lower()
    while True:
        pick = (lambda: varied_syllable(rng)) if varied else (lambda: rng.choice(SYLLABLES))
        text = "".join(pick() for _ in range(rng.randint(*syllables)))
        text = text.capitalize() if capital else text
        if text not in taken:
            return text


@functools.cache
def _heldout_values() -> set[str]:
    """Every city, name and word of the held-out split: an invented value must never be one."""
    return set(CITIES["heldout"]) | set(NAMES["heldout"]) | set(words("heldout"))


def with_fresh_entity(conversation: Conversation, rng: random.Random, varied: bool = False,
                      lexicon: CopyWords | None = None) -> Conversation:
    """The same kind of conversation about a freshly invented city, name or word.

    The training split has only 26 cities (52 forecasts), 24 names and 52 words: a small model
    can memorise "Pune -> 31%" instead of learning to *copy* the city into the call and the
    number out of the tool result, and then fails on every held-out city. Invented values
    (never a held-out one) make copying the only way to get the answer right. Weather and letter
    conversations are rebuilt, so the tool results stay real; in memory and no-tool conversations
    the name or city is swapped in the text. A ReAct weather or letters conversation is rebuilt the
    same way and rewritten as ReAct text, and a repeat conversation gets as many invented words.
    Other kinds come back unchanged.
    """
    taken, kind, facts = _heldout_values(), conversation.kind, conversation.expected.facts
    if kind == "react" and facts["task"] in ("weather", "letters"):  # only the facts of the original are read
        return as_react(with_fresh_entity(dataclasses.replace(conversation, kind=facts["task"]), rng, varied, lexicon))
    if kind == "weather":
        question = rng.choice(list(WEATHER_QUESTIONS))
        city = _invent(rng, (1, 3) if varied else (2, 3), taken, True, varied, lexicon)
        return weather_conversation(city, facts["day"], question=question, thinking=rng.choice(WEATHER_THINKING),
                                    split="train")
    if kind == "letters":
        word = _invent(rng, (2, 8) if not varied else (1, 4), taken, False, varied, lexicon)
        return letters_conversation(rng, "train", word=word)
    if kind == "repeat":
        items = [_invent(rng, (1, 3), taken, rng.random() < 0.5, varied, lexicon) for _ in facts["items"]]
        return repeat_conversation(rng, "train", items)
    old = facts.get("name") if kind == "memory" else facts.get("city") if kind == "no_tool" else None
    if old is None:
        return conversation
    new = _invent(rng, (1, 3) if kind == "memory" or varied else (2, 3), taken, True, varied, lexicon)
    swap = lambda text: re.sub(rf"\b{re.escape(old)}\b", new, text)  # noqa: E731
    messages = [{"role": m["role"], "content": swap(m["content"]) if isinstance(m["content"], str) else
                 [{**b, **{k: swap(b[k]) for k in ("text", "thinking") if k in b}} for b in m["content"]]}
                for m in conversation.messages]
    return dataclasses.replace(conversation, messages=messages)


def pad_batch(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[bool]], *, pad_id: int,
              context_length: int) -> Batch:
    """Rows of ids and loss masks -> a ``Batch`` padded to the longest row.

    Targets are the ids shifted left by one; a target counts only where its mask is True, so pad
    positions (mask False) teach nothing. A row longer than ``context_length + 1`` ids is an error,
    never silently cut: a cut conversation would train the model on half an answer.
    """
    longest = max(len(r) for r in rows)
    if longest > context_length + 1:
        raise ValueError(f"a conversation has {longest} tokens but the model reads at most {context_length + 1} "
                         f"(context {context_length} + 1 target); shorten it or drop it from the data")
    width = longest - 1
    inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (ids, trained) in enumerate(zip(rows, masks)):
        n = len(ids) - 1
        inputs[i, :n] = torch.tensor(ids[:-1])
        targets[i, :n] = torch.tensor(ids[1:])
        mask[i, :n] = torch.tensor(trained[1:], dtype=torch.bool)
    return Batch(inputs, targets, mask)


def conversation_batch(conversations: Sequence[Conversation], tokenizer, context_length: int) -> Batch:
    """Render conversations with the chat template; the loss mask is the template's (assistant tokens)."""
    rendered = [c.render(tokenizer) for c in conversations]
    return pad_batch([r.ids for r in rendered], [r.mask for r in rendered],
                     pad_id=marker_ids(tokenizer)["endoftext"], context_length=context_length)


def step_seed(seed: int, step: int) -> int:
    """A distinct data seed per step, so a batch is a pure function of (seed, step) (resumable)."""
    return seed * 1_000_003 + step


# ------------------------------------------------------------------------------------------- DPO
def answer_logprobs(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of log p(target) over the masked positions of each row: log p(answer | prompt)."""
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (logp * mask.to(logp.dtype)).sum(dim=-1)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, reference_chosen: torch.Tensor,
             reference_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The DPO loss (mean over pairs) and the implicit reward accuracy.

    Each argument holds one log-probability per pair. The implicit reward of an answer is
    ``beta * (log p_policy - log p_reference)``; accuracy is the fraction of pairs whose chosen
    answer gets the strictly higher reward.
    """
    chosen_reward = beta * (policy_chosen - reference_chosen)
    rejected_reward = beta * (policy_rejected - reference_rejected)
    margin = chosen_reward - rejected_reward
    return -F.logsigmoid(margin).mean(), (margin > 0).float().mean()


def preference_batch(pairs: Sequence[Preference], tokenizer, context_length: int) -> Batch:
    """Chosen rows first, then rejected rows (same order); the mask covers the answer tokens only."""
    rows, masks = [], []
    for answer in ("chosen", "rejected"):
        for pair in pairs:
            ids = pair.render(tokenizer)
            rows.append(ids["prompt"] + ids[answer])
            masks.append([False] * len(ids["prompt"]) + [True] * len(ids[answer]))
    return pad_batch(rows, masks, pad_id=marker_ids(tokenizer)["endoftext"], context_length=context_length)


class DPOObjective:
    """DPO as a ``(batch_at, loss_fn)`` pair for ``llmkit.training.train.fit``.

    ``batch_at`` builds the step's pairs and scores them once with the frozen reference (no
    gradient); ``loss_fn`` then compares the policy's log-probabilities against those scores.
    The last step's reward accuracy is kept for the log.

    DPO only sees the *difference* between the chosen and the rejected answer, so tokens they share
    (the closing ``<|end_turn|>``, the answer's format) are free to drift, and they did: the first
    DPO model wrote ``<|end_thinking|>`` where ``<|end_turn|>`` belonged. ``sft_weight`` adds the
    chosen answers' mean next-token loss, the SFT objective, to hold them in place.
    """

    def __init__(self, reference: Transformer, tokenizer, cfg: FinetuneConfig, device: torch.device):
        self.reference, self.tokenizer, self.cfg, self.device = reference.eval(), tokenizer, cfg, device
        self.reference_logprobs: torch.Tensor | None = None
        self.accuracies: list[float] = []
        for p in self.reference.parameters():
            p.requires_grad_(False)

    def pairs(self, n: int, split: str, seed: int) -> list[Preference]:
        return make_preferences(n, split=split, seed=seed, kinds=self.cfg.kinds)

    @torch.no_grad()
    def score_reference(self, batch: Batch) -> torch.Tensor:
        batch = batch.to(self.device)
        return answer_logprobs(self.reference(batch.inputs), batch.targets, batch.mask)

    def batch_at(self, step: int) -> Batch:
        pairs = self.pairs(self.cfg.batch_size, "train", step_seed(self.cfg.seed, step))
        batch = preference_batch(pairs, self.tokenizer, self.reference.config.context_length)
        self.reference_logprobs = self.score_reference(batch)
        return batch

    def loss_fn(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        policy = answer_logprobs(logits, targets, mask)
        n = policy.shape[0] // 2
        reference = self.reference_logprobs
        loss, accuracy = dpo_loss(policy[:n], policy[n:], reference[:n], reference[n:], self.cfg.beta)
        self.accuracies.append(accuracy.item())
        if self.cfg.sft_weight:
            chosen_tokens = mask[:n].sum()
            loss = loss + self.cfg.sft_weight * -policy[:n].sum() / chosen_tokens.clamp(min=1)
        return loss

    @torch.no_grad()
    def heldout_scores(self, policy: Transformer, pairs: Sequence[Preference]) -> dict[str, float]:
        """Mean DPO loss and implicit reward accuracy of ``policy`` on held-out pairs."""
        was_training = policy.training
        policy.eval()
        losses, accuracies = [], []
        for start in range(0, len(pairs), 16):
            batch = preference_batch(pairs[start:start + 16], self.tokenizer, policy.config.context_length)
            reference = self.score_reference(batch)
            batch = batch.to(self.device)
            mine = answer_logprobs(policy(batch.inputs), batch.targets, batch.mask)
            n = mine.shape[0] // 2
            loss, accuracy = dpo_loss(mine[:n], mine[n:], reference[:n], reference[n:], self.cfg.beta)
            losses.append(loss.item() * n)
            accuracies.append(accuracy.item() * n)
        policy.train(was_training)
        return {"loss": sum(losses) / len(pairs), "reward_accuracy": sum(accuracies) / len(pairs)}


# ------------------------------------------------------------------------------------------ runs
@torch.no_grad()
def masked_loss(model: Transformer, batches: Sequence[Batch]) -> float:
    """Mean loss per supervised token over held-out batches (the assistant's tokens only)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(device)
        n = int(batch.mask.sum())
        total += lm_loss(model(batch.inputs), batch.targets, batch.mask).item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def model_folder(name_or_dir: str) -> Path:
    """The folder of a model given as a path or as a shipped name ("base", "chat")."""
    path = Path(name_or_dir)
    return path if path.is_dir() else data_path("models", name_or_dir)


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Set every dropout probability in ``model`` to ``p``.

    Dropout lives in two forms: ``nn.Dropout`` modules, and plain float ``dropout`` attributes
    that attention hands to the fused SDPA kernel and the blocks to ``F.dropout``. Missing the
    second kind would leave dropout on while the config says it is off.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        elif isinstance(getattr(module, "dropout", None), float):
            module.dropout = p
    if isinstance(getattr(model, "config", None), ModelConfig):
        model.config = dataclasses.replace(model.config, dropout=p)


def finetune(stage: str, cfg: FinetuneConfig, *, resume: bool = False, stop_after: int | None = None,
             progress: bool = True) -> Transformer:
    """Run SFT (``stage="sft"``) or DPO (``"dpo"``) as ``cfg`` says; returns the fine-tuned model.

    Writes into ``cfg.out_dir``: ``<stage>_config.json``, ``train_log.jsonl``, ``checkpoint/`` and,
    when finished, ``model/`` (config.json, model.safetensors, tokenizer.json) for ``load_model``.
    """
    if stage not in ("sft", "dpo"):
        raise ValueError(f"stage must be 'sft' or 'dpo', got {stage!r}")
    procs = Processes(resolve_device(cfg.device))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stage}_config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    model, tokenizer = load_model(cfg.base_model, device=procs.device)
    set_dropout(model, cfg.dropout)
    context = model.config.context_length
    optimizer = make_optimizer(model, cfg)
    log = TrainingLog(out_dir / "train_log.jsonl")

    if stage == "sft":
        source = example_source(cfg.data, cfg.kinds, cfg.fresh_entities, cfg.varied_entities,
                                fits=lambda c: len(c.render(tokenizer)) <= context + 1,
                                lexicon=CopyWords.for_corpus(tokenizer) if cfg.corpus_entities else None)
        heldout = source(cfg.heldout_examples, "heldout", cfg.seed)
        heldout_batches = [conversation_batch(heldout[i:i + 16], tokenizer, context) for i in range(0, len(heldout), 16)]
        batch_at = lambda step: conversation_batch(source(cfg.batch_size, "train", step_seed(cfg.seed, step)),  # noqa: E731
                                                   tokenizer, context)
        loss_fn = lm_loss

        def report(step: int) -> dict[str, str]:
            loss = masked_loss(model, heldout_batches)
            log.write(kind="eval", step=step, heldout_loss=round(loss, 4))
            return {"heldout_loss": f"{loss:.3f}"}
    else:
        reference, _ = load_model(cfg.base_model, device=procs.device)
        objective = DPOObjective(reference, tokenizer, cfg, procs.device)
        heldout_pairs = objective.pairs(cfg.heldout_examples, "heldout", cfg.seed)
        batch_at, loss_fn = objective.batch_at, objective.loss_fn

        def report(step: int) -> dict[str, str]:
            scores = objective.heldout_scores(model, heldout_pairs)
            recent = objective.accuracies[-cfg.eval_every:]
            train_accuracy = sum(recent) / len(recent) if recent else None
            log.write(kind="eval", step=step, heldout_loss=round(scores["loss"], 4),
                      heldout_reward_accuracy=round(scores["reward_accuracy"], 4),
                      train_reward_accuracy=None if train_accuracy is None else round(train_accuracy, 4))
            return {"reward_acc": f"{scores['reward_accuracy']:.2f}"}

    start_step = 0
    if resume:
        start_step = load_checkpoint(out_dir / "checkpoint", model, optimizer, procs)["step"]
        log.truncate_after(start_step)
    else:
        (out_dir / "train_log.jsonl").unlink(missing_ok=True)
        report(0)
    fit(model, optimizer, batch_at, cfg, procs, start_step=start_step, stop_after=stop_after, loss_fn=loss_fn,
        on_report=report, log=log, progress=progress,
        on_checkpoint=lambda step: save_checkpoint(out_dir / "checkpoint", model, optimizer, step, procs))

    if stop_after is None or stop_after >= cfg.max_steps:
        set_dropout(model, 0.0)
        model.save(out_dir / "model")
        shutil.copyfile(model_folder(cfg.base_model) / "tokenizer.json", out_dir / "model" / "tokenizer.json")
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llmkit finetune",
                                     description="Fine-tune a model: SFT on conversations, or DPO on preference pairs.")
    parser.add_argument("stage", choices=["sft", "dpo"])
    parser.add_argument("--config", required=True, help="a JSON file of FinetuneConfig keys")
    parser.add_argument("--resume", action="store_true", help="continue from <out_dir>/checkpoint")
    parser.add_argument("--stop-after", type=int, help="stop after this step (a checkpoint is written)")
    for key in ("device", "dtype", "out_dir", "base_model", "threads", "max_steps"):
        parser.add_argument("--" + key.replace("_", "-"), dest=key, help=f"override the config's {key}")
    args = parser.parse_args(argv)
    if not Path(args.config).is_file():
        parser.error(f"config file {args.config} does not exist")
    values = json.loads(Path(args.config).read_text(encoding="utf-8"))
    for key in ("device", "dtype", "out_dir", "base_model"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    for key in ("threads", "max_steps"):
        if getattr(args, key) is not None:
            values[key] = int(getattr(args, key))
    cfg = FinetuneConfig.from_dict(values, source=args.config)
    started = time.perf_counter()
    finetune(args.stage, cfg, resume=args.resume, stop_after=args.stop_after)
    evals = [r for r in read_log(Path(cfg.out_dir) / "train_log.jsonl") if r["kind"] == "eval"]
    if evals:
        print(json.dumps(evals[-1]), f"{(time.perf_counter() - started) / 60:.1f} min")
