"""Direct preference optimisation (DPO): raise a chosen answer over a rejected one.

A preference pair is a prompt with a *chosen* answer (call the tool, say "I can't know") and a
*rejected* one (invent a number). DPO raises the log-probability of chosen over rejected, measured
*relative to a frozen reference* (the model before DPO)::

    reward(answer) = beta * (log p_policy(answer) - log p_reference(answer))
    loss = -log sigmoid(reward(chosen) - reward(rejected))

The reference keeps the policy from drifting far: it only gains by moving probability between
the two answers, not by forgetting everything else. With policy = reference every reward is 0 and
the loss is ln 2; the *implicit reward accuracy* is how often reward(chosen) > reward(rejected).
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import torch
import torch.nn.functional as F

from llmkit.chat.markers import marker_ids
from llmkit.model.transformer import Transformer
from llmkit.training.config import FinetuneConfig
from llmkit.training.data import Batch
from llmkit.training.sft import pad_batch, step_seed


class PreferencePair(Protocol):
    """Anything that renders to ``{"prompt": ids, "chosen": ids, "rejected": ids}``."""

    def render(self, tokenizer) -> dict[str, list[int]]: ...


PairSource = Callable[[int, str, int], Sequence[PreferencePair]]  # (n, split, seed) -> pairs


def answer_logprobs(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of log p(target) over the masked positions of each row: log p(answer | prompt)."""
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (logp * mask.to(logp.dtype)).sum(dim=-1)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, reference_chosen: torch.Tensor,
             reference_rejected: torch.Tensor, beta: float,
             positive_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The DPO loss (mean over pairs) and the implicit reward accuracy.

    Each argument holds one log-probability per pair. The implicit reward of an answer is
    ``beta * (log p_policy - log p_reference)``; accuracy is the fraction of pairs whose chosen
    answer gets the strictly higher reward.

    ``positive_weight`` is DPO-Positive's lambda (Pal et al. 2024): when chosen and rejected differ
    in a token or two, the margin can grow while *both* answers lose probability, the chosen one a
    little less, so the model ends up less likely to write the right answer than before. The term
    ``beta * lambda * max(0, log p_reference(chosen) - log p_policy(chosen))``, taken off the margin,
    makes every nat the chosen answer loses below the reference cost; above it, nothing changes.
    """
    chosen_reward = beta * (policy_chosen - reference_chosen)
    rejected_reward = beta * (policy_rejected - reference_rejected)
    margin = chosen_reward - rejected_reward
    penalty = beta * positive_weight * torch.clamp(reference_chosen - policy_chosen, min=0.0)
    return -F.logsigmoid(margin - penalty).mean(), (margin > 0).float().mean()


def preference_batch(pairs: Sequence[PreferencePair], tokenizer, context_length: int) -> Batch:
    """Chosen rows first, then rejected rows (same order); the mask covers the answer tokens only."""
    rows, masks = [], []
    for answer in ("chosen", "rejected"):
        for pair in pairs:
            ids = pair.render(tokenizer)
            rows.append(ids["prompt"] + ids[answer])
            masks.append([False] * len(ids["prompt"]) + [True] * len(ids[answer]))
    return pad_batch(rows, masks, pad_id=marker_ids(tokenizer)["endoftext"], context_length=context_length)


class DPOObjective:
    """DPO as a ``(batch_at, loss_fn)`` pair for ``llmkit.training.loop.fit``.

    ``batch_at`` builds the step's pairs and scores them once with the frozen reference (no
    gradient); ``loss_fn`` then compares the policy's log-probabilities against those scores.
    Each step's reward accuracy is kept for the log.

    DPO only sees the *difference* between the chosen and the rejected answer, so tokens they share
    (the closing ``<|end_turn|>``, the answer's format) are free to drift. ``sft_weight`` adds the
    chosen answers' mean next-token loss, the SFT objective, to hold them in place.
    """

    def __init__(self, reference: Transformer, tokenizer, cfg: FinetuneConfig, device: torch.device,
                 pairs: PairSource | None = None):
        self.reference, self.tokenizer, self.cfg, self.device = reference.eval(), tokenizer, cfg, device
        self.pairs = pairs
        self.reference_logprobs: torch.Tensor | None = None
        self.accuracies: list[float] = []
        self.chosen_rewards: list[float] = []  # per step, mean beta * (log p_policy - log p_reference)
        self.rejected_rewards: list[float] = []
        for p in self.reference.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def score_reference(self, batch: Batch) -> torch.Tensor:
        batch = batch.to(self.device)
        return answer_logprobs(self.reference(batch.inputs), batch.targets, batch.mask)

    def batch_at(self, step: int) -> Batch:
        if self.pairs is None:
            raise ValueError("DPOObjective.batch_at needs a pair source: DPOObjective(..., pairs=source)")
        pairs = self.pairs(self.cfg.batch_size, "train", step_seed(self.cfg.seed, step))
        batch = preference_batch(pairs, self.tokenizer, self.reference.config.context_length)
        self.reference_logprobs = self.score_reference(batch)
        return batch

    def loss_fn(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        policy = answer_logprobs(logits, targets, mask)
        n = policy.shape[0] // 2
        reference = self.reference_logprobs
        loss, accuracy = dpo_loss(policy[:n], policy[n:], reference[:n], reference[n:], self.cfg.beta,
                                  self.cfg.positive_weight)
        self.accuracies.append(accuracy.item())
        with torch.no_grad():
            self.chosen_rewards.append(self.cfg.beta * (policy[:n] - reference[:n]).mean().item())
            self.rejected_rewards.append(self.cfg.beta * (policy[n:] - reference[n:]).mean().item())
        if self.cfg.sft_weight:
            chosen_tokens = mask[:n].sum()
            loss = loss + self.cfg.sft_weight * -policy[:n].sum() / chosen_tokens.clamp(min=1)
        return loss

    @torch.no_grad()
    def heldout_scores(self, policy: Transformer, pairs: Sequence[PreferencePair]) -> dict[str, float]:
        """Mean DPO loss, implicit reward accuracy and mean chosen and rejected rewards of ``policy``
        on held-out pairs. A chosen reward below 0 means the right answer became *less* likely than
        under the reference, however well the pairs are ordered."""
        was_training = policy.training
        policy.eval()
        totals = {"loss": 0.0, "reward_accuracy": 0.0, "chosen_reward": 0.0, "rejected_reward": 0.0}
        for start in range(0, len(pairs), 16):
            batch = preference_batch(pairs[start:start + 16], self.tokenizer, policy.config.context_length)
            reference = self.score_reference(batch)
            batch = batch.to(self.device)
            mine = answer_logprobs(policy(batch.inputs), batch.targets, batch.mask)
            n = mine.shape[0] // 2
            loss, accuracy = dpo_loss(mine[:n], mine[n:], reference[:n], reference[n:], self.cfg.beta,
                                      self.cfg.positive_weight)
            totals["loss"] += loss.item() * n
            totals["reward_accuracy"] += accuracy.item() * n
            totals["chosen_reward"] += self.cfg.beta * (mine[:n] - reference[:n]).sum().item()
            totals["rejected_reward"] += self.cfg.beta * (mine[n:] - reference[n:]).sum().item()
        policy.train(was_training)
        return {name: total / len(pairs) for name, total in totals.items()}
