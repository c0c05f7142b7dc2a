"""Teacher-forced scores: one skill at a time, every token before it given.

A greedy reply (``llmkit.course.skill_scores``) fails for the first mistake it makes; here the
model is given the right conversation up to the place a skill is needed and asked for the next
tokens only, so a skill can be seen forming while the replies still fail for other reasons:

- ``tool_name_choice``: the whole tool name, token by token, with no thinking step to copy from;
- ``name_choice``: the tool as the client's constrained decoding chooses it, thinking given;
- ``argument_copy``: each argument value of the first call, split by whether the prompt holds
  it in the same tokens (``argument_values``).

``teacher_forced_scores`` gathers them as flat figures for a training log or an evals report.
"""
from __future__ import annotations

import json

from llmkit.chat.template import render
from llmkit.course.lookups import token_positions
from llmkit.course.skills import SkillConversation, make_skills


def tool_name_choice(model, tokenizer, specs: list[SkillConversation]) -> dict[str, float | int]:
    """Teacher-forced: how often the model writes the first call's whole tool name right.

    Every token before the name is given (the prompt, ``<|tool_call|>{"name": "``), so this is the
    choice of tool alone, with no earlier mistake to blame (in use the model must also get there).
    A thinking step is taken out first: the training data's names the tool, so with it the choice
    would be a copy. ``chance`` is what picking one of the offered tools at random would score: a
    model at or below it has not learned to read the tool list, whatever its loss says.
    """
    def in_the_call(spec: SkillConversation) -> tuple[list[int], list[int]]:
        ids = without_thinking(spec).render(tokenizer).ids
        marker = ids.index(tokenizer.special_tokens["<|tool_call|>"])
        return ids, _first_call_name_positions(tokenizer, ids, marker, spec.expected.calls[0][0])
    return _choice_share(specs, lambda spec: all(forced_hits(model, *in_the_call(spec))))


def name_choice(model, tokenizer, specs: list[SkillConversation]) -> dict[str, float | int]:
    """Teacher-forced, the thinking given: how often the tool the client would call is the expected
    first call's. Everything up to ``<|tool_call|>`` is given, and the client's constrained decoding
    chooses among the offered tools by the model's probability of each whole call opening
    (``llmkit.chat.constrained.call_openings``, ``llmkit.generation.choice``); the expected call is
    the first after the prompt, so earlier turns (the ``errands`` kind) are context.

    This is the tool choice as a learner's client makes it, with no earlier mistake to blame.
    ``tool_name_choice`` asks instead for the name token by token with no thinking at all.
    """
    from llmkit.chat.constrained import call_openings
    from llmkit.generation.choice import score_after

    def chooses_right(spec: SkillConversation) -> bool:
        ids = spec.render(tokenizer).ids
        asked = len(render(tokenizer, spec.prompt, tools=spec.definitions or None, system=spec.system).ids)
        marker = ids.index(tokenizer.special_tokens["<|tool_call|>"], asked - 1)
        openings = call_openings(tokenizer, spec.definitions)
        if openings is None:
            raise ValueError(f"the tokenizer splits a call opening of {[t.name for t in spec.tools]} differently "
                             "inside a whole call, so the client would choose token by token")
        scores = score_after(model, ids[:marker + 1], openings)
        return spec.tools[int(scores.argmax())].name == spec.expected.calls[0][0]
    return _choice_share(specs, chooses_right)


def forced_hits(model, ids: list[int], positions: list[int]) -> list[bool]:
    """Teacher-forced: for each of ``positions``, whether the model, given every token before it,
    predicts the token there (greedy). One forward pass up to the last position."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids[:positions[-1] + 1]], device=next(model.parameters()).device))[0]
    return [int(logits[i - 1].argmax()) == ids[i] for i in positions]


def _choice_share(specs: list[SkillConversation], is_right) -> dict[str, float | int]:
    """The share of tool-calling ``specs`` where ``is_right(spec)``, beside the share that picking
    one offered tool at random would get."""
    calling = [spec for spec in specs if spec.expected.calls]
    right, chance, n = sum(map(is_right, calling)), sum(1 / len(spec.tools) for spec in calling), len(calling)
    if n == 0:
        raise ValueError("none of these conversations calls a tool; use tool-calling kinds such as 'tool'")
    return {"right": right / n, "chance": chance / n, "n": n}


TOOL_CALLING_KINDS = ("tool", "weather", "letters", "search", "arithmetic", "multi")


def teacher_forced_scores(model, tokenizer, split: str, *, n: int = 40, seed: int = 11) -> dict[str, float]:
    """The teacher-forced skills on conversations of ``split``, as flat figures for a log:
    ``tool_choice`` and ``name_choice`` on ``n`` generated-tool conversations (beside
    ``tool_choice_chance``, which is the chance of both) and
    ``copy_in_prompt`` / ``copy_respelled`` on the argument values of ``n`` conversations of the
    tool-calling kinds in turn."""
    tool_specs = make_skills(n, split=split, seed=seed, kinds=["tool"])
    choice = tool_name_choice(model, tokenizer, tool_specs)
    chosen = name_choice(model, tokenizer, tool_specs)
    copy = argument_copy(model, tokenizer, make_skills(n, split=split, seed=seed, kinds=list(TOOL_CALLING_KINDS)))
    figures = {"tool_choice": round(choice["right"], 4), "tool_choice_chance": round(choice["chance"], 4),
               "name_choice": round(chosen["right"], 4)}
    figures.update({f"copy_{group}": round(g["right"], 4) for group, g in copy.items() if g["n"]})
    return figures


def without_thinking(spec: SkillConversation) -> SkillConversation:
    """The same conversation with every thinking block taken out of the assistant's messages."""
    import dataclasses

    messages = [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
                if m["role"] == "assistant" and isinstance(m["content"], list) else m for m in spec.messages]
    return dataclasses.replace(spec, messages=messages)


def argument_copy(model, tokenizer, specs: list[SkillConversation]) -> dict[str, dict[str, float | int]]:
    """Teacher-forced: how often the model writes each argument value of the first call right.

    Every token before the value is given, so this is copying alone. The values are split in two
    (``argument_values``): ``in_prompt``, whose tokens occur in that order in the prompt, so a
    model can copy them token by token; and ``respelled``, which the prompt has in other tokens.
    Each group also says where a copy goes wrong: ``first_token`` (the value's first token right:
    the model found the word to copy) and ``later_tokens`` (for values of two tokens or more, every
    later token right once the first is given: it copied on from there), with ``n_later``.
    """
    counts = {group: {"right": 0, "first": 0, "later": 0, "n": 0, "n_later": 0} for group in ("in_prompt", "respelled")}
    for spec, ids, positions, group in argument_values(tokenizer, specs):
        hits = forced_hits(model, ids, positions)
        tally = counts[group]
        tally["right"] += all(hits)
        tally["first"] += hits[0]
        tally["n"] += 1
        if len(hits) > 1:
            tally["later"] += all(hits[1:])
            tally["n_later"] += 1

    return {group: {"right": _share(c["right"], c["n"]), "n": c["n"], "first_token": _share(c["first"], c["n"]),
                    "later_tokens": _share(c["later"], c["n_later"]), "n_later": c["n_later"]}
            for group, c in counts.items()}


def _share(part: int, whole: int) -> float:
    return part / whole if whole else float("nan")


def argument_values(tokenizer, specs: list[SkillConversation]):
    """Each argument value of the expected first call, the first after ``spec.prompt`` (an errand's
    earlier turns hold calls too): (spec, rendered ids, the value's token positions, group).

    ``group`` is ``in_prompt`` when the value's tokens, as the call spells them, occur in that order
    in the prompt, else ``respelled``: " Pune" typed after a space and "Pune" in a JSON string are
    other tokens under GPT-4's pre-split, the same under the course's ``spaced`` one. True/false
    values are left out: the user never writes them.
    """
    marker = tokenizer.special_tokens["<|tool_call|>"]
    for spec in specs:
        if not spec.expected.calls:
            continue
        ids = spec.render(tokenizer).ids
        at = ids.index(marker, _prompt_length(tokenizer, spec, ids))
        for start, end in _argument_value_bytes(*spec.expected.calls[0]):
            positions = token_positions(tokenizer, ids, at, start, end)
            value_ids = ids[positions[0]:positions[-1] + 1]
            yield spec, ids, positions, "in_prompt" if _occurs_in(ids[:at], value_ids) else "respelled"


def _prompt_length(tokenizer, spec: SkillConversation, ids: list[int]) -> int:
    """How many of the conversation's ``ids`` its prompt renders to (checked to be their start)."""
    prompt = render(tokenizer, spec.prompt, tools=spec.definitions or None, system=spec.system,
                    add_generation_prompt=False).ids
    if ids[:len(prompt)] != prompt:
        raise AssertionError(f"the {spec.kind} conversation's prompt does not render as the start of it")
    return len(prompt)


def _argument_value_bytes(name: str, arguments: dict) -> list[tuple[int, int]]:
    """Byte spans, in the call's text, of each non-boolean value (a string without its quotes)."""
    def dumps(value) -> str:
        return json.dumps(value, ensure_ascii=False)  # as the chat template writes a call

    text = dumps({"name": name, "input": arguments}).encode("utf-8")
    spans, offset = [], text.index(b'"input": ')
    for key, value in arguments.items():
        written = (dumps(key) + ": " + dumps(value)).encode("utf-8")
        offset = text.index(written, offset)
        start, end = offset + len(dumps(key).encode("utf-8")) + 2, offset + len(written)
        offset = end
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue
        spans.append((start + 1, end - 1) if isinstance(value, str) else (start, end))
    return spans


def _occurs_in(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def _first_call_name_positions(tokenizer, ids: list[int], marker_at: int, name: str) -> list[int]:
    """Positions of the tokens that spell ``name`` (and its closing quote) after ``<|tool_call|>``."""
    opening = b'{"name": "'
    start = len(opening)
    try:
        return token_positions(tokenizer, ids, marker_at, start, start + len(name.encode("utf-8")) + 1)
    except ValueError:
        raise ValueError(f"the rendered call does not spell {name!r}") from None
