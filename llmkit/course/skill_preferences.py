"""Preference pairs for DPO from the skill conversations: the right move against a typical mistake.

SFT shows the model what to write; DPO then pushes probability away from the errors a model that
memorises instead of reading makes: calling a distractor tool, miscopying a value by a letter or
a digit, answering with a name it did not hear, inventing a number no tool gave.
"""
from __future__ import annotations

import random

from llmkit.course.preferences import Preference
from llmkit.course.skills import SkillConversation, make_skill
from llmkit.course.skill_scores import introduction
from llmkit.course.values import draw


def skill_preference(conversation: SkillConversation, rng: random.Random) -> Preference | None:
    """A DPO pair from a conversation: its first assistant message (chosen) against a typical mistake
    (rejected): a distractor called, a value miscopied, a name misremembered, a number invented."""
    prompt = conversation.prompt
    chosen = conversation.messages[len(prompt)]
    expected, kind = conversation.expected, conversation.kind
    if expected.calls:
        name, tool_input = expected.calls[0]
        others = [t.name for t in conversation.tools if t.name != name]
        if others and rng.random() < 0.5:
            rejected_call = {"name": rng.choice(others), "input": tool_input}
        else:
            rejected_call = {"name": name, "input": {k: _miscopy(rng, v) for k, v in tool_input.items()}}
            if rejected_call["input"] == tool_input:
                rejected_call = {"name": name + "s", "input": tool_input}
        thinking = [b for b in chosen["content"] if b["type"] == "thinking"]
        rejected = {"role": "assistant", "content": thinking + [{"type": "tool_use", "id": "toolu_0", **rejected_call}]}
    elif kind == "memory":
        rejected = {"role": "assistant", "content": f"Your name is {draw(rng, 'name', 'train')}."}
    elif kind == "missing":
        rejected = {"role": "assistant", "content": f"The {expected.facts['subject']} is {rng.randint(2, 999)}."}
    else:
        return None
    return Preference(kind, conversation.split, prompt, conversation.definitions or None, conversation.system,
                      chosen, rejected)


def greeting_preference(conversation: SkillConversation, rng: random.Random) -> Preference:
    """A DPO pair on a memory conversation's introduction: the greeting by name (chosen) against
    the refusal of a missing tool, or a greeting of another word of the introduction (rejected)."""
    name = conversation.expected.name
    if not name:
        raise ValueError(f"a greeting pair needs a conversation that introduces a name (memory, memory_open), "
                         f"not one of kind {conversation.kind!r}")
    intro = introduction(conversation)
    others = [w.strip(".,!?:;'\"") for w in intro.messages[0]["content"].split()]
    others = [w for w in others if w and name not in w] or ["there"]
    word = rng.choice(others)
    if rng.random() < 0.5:
        text = rng.choice([f"I have no tool for the {word}, so I can't know it.",
                           f"Sorry, I don't have a tool that gives the {word}."])
    else:
        text = f"Nice to meet you, {word}!"
    return Preference(conversation.kind, conversation.split, intro.messages[:1], conversation.definitions or None,
                      conversation.system, intro.messages[1], {"role": "assistant", "content": text})


def _miscopy(rng: random.Random, value):
    """A near miss of a value: the error a model that remembers instead of copying makes."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + rng.choice([1, -1, 10])
    if len(value) > 2:
        i = rng.randrange(len(value) - 1)
        return value[:i] + value[i + 1] + value[i] + value[i + 2:] if value[i] != value[i + 1] else value[:-1]
    return value + "a"


def make_skill_preferences(n: int, *, split: str = "train", seed: int = 0, open_framing: bool = False,
                           open_enums: bool = False, open_talk: bool = False,
                           greetings: float = 0.0) -> list[Preference]:
    """``n`` DPO pairs of ``split`` (kinds with a clear mistake to prefer against).

    ``open_framing``, ``open_enums``, ``open_talk``: the conversations take the open data settings
    of ``make_skill``, so a preference stage can read the same kind of data as the SFT stages
    before it. ``greetings``: the share of pairs that are greeting pairs (``greeting_preference``),
    on introductions of the memory kind or of open words (``memory_open``), half each."""
    if isinstance(greetings, bool) or not isinstance(greetings, (int, float)) or not 0 <= greetings <= 1:
        raise ValueError(f"greetings is a share of the pairs, from 0 to 1; got {greetings!r}")
    rng = random.Random(f"llmkit-skill-preferences|{split}|{seed}")
    pairs, i = [], 0
    while len(pairs) < n:
        kind = rng.choice(["tool", "tool", "weather", "letters", "arithmetic", "missing", "memory", "multi"])
        greet = greetings and rng.random() < greetings
        if greet:
            kind = rng.choice(["memory", "memory_open"])
        conversation = make_skill(kind, split, f"pref|{seed}|{i}", open_framing=open_framing,
                                  open_enums=open_enums, open_talk=open_talk)
        pair = greeting_preference(conversation, rng) if greet else skill_preference(conversation, rng)
        i += 1
        if pair is not None:
            pairs.append(pair)
    return pairs
