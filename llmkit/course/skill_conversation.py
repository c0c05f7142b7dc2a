"""What a skill conversation is, and which held-out pools each split draws from.

Splits (``SPLIT_SOURCES``): ``train``, ``seen`` (other seeds), ``unseen_values``,
``unseen_phrasings_and_tools`` (all three held out; the evals report these three, ``EVAL_SPLITS``),
and ``unseen_phrasings``, ``unseen_tools`` (one factor and the values held out, to tell which one a
model fails on). A conversation is the message/tools structure ``llmkit.chat.template.render``
reads, so fine-tuning consumes it as is, and every reply ends its turn.
``llmkit.course.skills`` builds the conversations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llmkit.chat.template import Rendered, render
from llmkit.chat.tools import Tool
from llmkit.course.lookups import lookup_weights

SPLIT_SOURCES = {"train": ("train", "train", "train"), "seen": ("train", "train", "train"),  # (phrasings, tools, values)
    "unseen_values": ("train", "train", "heldout"), "unseen_phrasings_and_tools": ("heldout", "heldout", "heldout"),
    "unseen_phrasings": ("heldout", "train", "heldout"), "unseen_tools": ("train", "heldout", "heldout")}
SPLITS, EVAL_SPLITS = tuple(SPLIT_SOURCES), ("seen", "unseen_values", "unseen_phrasings_and_tools")


@dataclass(frozen=True)
class Expected:
    """What a correct assistant does: its ``calls`` (name, input) in order, the ``answer_paths``
    into each call's result that the answer must quote, ``answer_values`` (those values for the
    right calls), ``name`` for memory, ``no_invention`` when nothing offered holds the answer."""

    calls: tuple[tuple[str, dict], ...] = ()
    answer_paths: tuple[tuple[str, ...], ...] = ()
    answer_values: tuple[str, ...] = ()
    name: str | None = None
    no_invention: bool = False
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SkillConversation:
    """One conversation: messages ending with the assistant's answer, the ``Tool`` objects offered
    (real ones: evaluations run them), the system prompt, its kind and split, and ``expected``."""

    kind: str
    split: str
    messages: list[dict]
    tools: list[Tool]
    system: str | None
    expected: Expected
    lookup_weight: float = 1.0  # the loss weight of the names its lookups write (``lookups.lookup_weights``)

    @property
    def definitions(self) -> list[dict]:
        return [t.definition() for t in self.tools]

    @property
    def prompt(self) -> list[dict]:
        """The messages up to the last one the user typed: where an evaluation lets the model go on."""
        typed = [i for i, m in enumerate(self.messages) if m["role"] == "user" and isinstance(m["content"], str)]
        return self.messages[: max(typed) + 1]

    def render(self, tokenizer) -> Rendered:
        """The conversation as ids and a loss mask; with a ``lookup_weight`` other than 1 the mask
        holds weights instead, that weight on the names the lookups write."""
        rendered = render(tokenizer, self.messages, tools=self.definitions or None, system=self.system,
                          add_generation_prompt=False)
        if self.lookup_weight == 1.0:
            return rendered
        weights = lookup_weights(tokenizer, rendered.ids, rendered.mask, self.messages, self.lookup_weight)
        return Rendered(rendered.ids, weights, rendered.roles, rendered.message_starts)


def splits_of(split: str) -> tuple[str, str, str]:
    """(phrasings, tool pools, values) a conversation split draws from, each "train" or "heldout"."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return SPLIT_SOURCES[split]
