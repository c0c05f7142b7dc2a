"""Preference pairs for DPO: the same prompt with a preferred and a rejected answer.

The chosen answer is the synthetic conversation's own (use the tool, say "I can't know" without
one, use the history); the rejected one answers at once with a guessed, usually wrong, value. DPO
learns from the pair which of the two the model should make more likely.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from llmkit.chat.template import render
from llmkit.course.conversation_data import NAMES, Conversation, check_split
from llmkit.course.conversations import BUILDERS, check_count, check_kinds, count_answer


@dataclass(frozen=True)
class Preference:
    """A DPO example: after ``prompt`` (with ``tools`` and ``system``), the ``chosen`` assistant
    message is preferred to the ``rejected`` one."""

    kind: str
    split: str
    prompt: list[dict]
    tools: list[dict] | None
    system: str | None
    chosen: dict
    rejected: dict

    def render(self, tokenizer) -> dict[str, list[int]]:
        """Ids of the prompt (ending in ``<|assistant|>``) and of each answer that follows it."""
        prompt = render(tokenizer, self.prompt, tools=self.tools, system=self.system).ids
        out = {"prompt": prompt}
        for name, answer in (("chosen", self.chosen), ("rejected", self.rejected)):
            full = render(tokenizer, self.prompt + [answer], tools=self.tools, system=self.system,
                          add_generation_prompt=False).ids
            assert full[: len(prompt)] == prompt, "the template must keep a prompt's ids as a prefix"
            out[name] = full[len(prompt):]
        return out


PREFERENCE_KINDS = ("weather", "no_tool", "letters", "arithmetic", "memory")


def _rejected(rng: random.Random, conversation: Conversation) -> dict:
    """An answer written without the tool (or without the history): a guessed, usually wrong value."""
    facts, kind = conversation.expected.facts, conversation.kind
    if kind in ("weather", "no_tool") and "city" in facts:
        text = f"Yes, take an umbrella: {rng.randint(55, 95)}% chance of rain."
    elif kind == "no_tool":
        text = f"It is {rng.randint(1, 12)}:{rng.randint(10, 59)}."
    elif kind == "letters":
        wrong = max(0, facts["count"] + rng.choice([-1, 1])) if facts["count"] else 1
        text = count_answer(facts["word"], facts["letter"], wrong)
    elif kind == "arithmetic":
        expression = conversation.expected.tool_input["expression"]
        text = f"{expression} = {round(facts['result']) + rng.choice([-10, -1, 1, 10])}."
    else:
        other = rng.choice([name for name in NAMES[conversation.split] if name != facts["name"]])
        text = f"Your name is {other}."
    return {"role": "assistant", "content": text}


def make_preferences(n: int, *, split: str = "train", seed: int = 0, kinds=None) -> list[Preference]:
    """``n`` DPO pairs: chosen = use the tool, say "I can't know" without one, or use the history;
    rejected = answer at once with an invented number (or name)."""
    kinds = check_kinds(PREFERENCE_KINDS if kinds is None else kinds)
    if "direct" in kinds:
        raise ValueError("'direct' conversations have no natural rejected answer; leave it out of kinds")
    if "react" in kinds:
        raise ValueError("'react' conversations are for SFT and the ReAct parse-failure measurement, not DPO; "
                         "leave it out of kinds")
    rng = random.Random(f"llmkit-preferences|{check_split(split)}|{seed}")
    pairs = []
    for i in range(check_count(n)):
        conversation = BUILDERS[kinds[i % len(kinds)]](rng, split)
        prompt = conversation.prompt
        pairs.append(Preference(conversation.kind, split, prompt, conversation.tools, conversation.system,
                                chosen=conversation.messages[len(prompt)], rejected=_rejected(rng, conversation)))
    return pairs
