"""Scoring a model on the skill conversations: did it pick the tool, copy the values, use the result?

Each score is a pure function of a conversation spec (``llmkit.course.skills.SkillConversation``)
and a transcript: the messages the model and the harness added after the prompt, plus the stop
reason of the last reply. ``None`` means "does not apply to this conversation" (no arguments to
copy when no tool is needed), so a fraction is taken over the conversations a score applies to.

- ``tool_call_valid``: every call names an offered tool and its arguments fit that tool's schema;
- ``calls_made``: where calls were due, the model wrote that many, valid or not (a low
  ``tool_call_valid`` beside a high ``calls_made`` means calls written wrong, not calls left out);
- ``right_tool``: the calls name the expected tools in order, or there is none when none fits;
- ``args_exact``: every argument equals what the user said (type included: 3 is not "3" or 3.0);
- ``answer_from_result``: the final text carries the value at the expected place in each result
  the tools actually returned;
- ``ends_turn``: the last reply stopped at end of turn (not max_tokens) and no three-word
  sequence repeats four times in its text (a loop that happened to stop is still a loop);
- ``no_invention``: asked for what no offered tool gives, no number the user did not write;
- ``memory``: the final text holds the name the user gave, exactly.

``evaluate_skills`` runs a model through ``Client`` + ``run_agent`` greedily on each split, with
the client's default decoding (a tool call is kept valid, and the tool's name chosen whole);
``name_choice`` measures the choice of tool alone as that client makes it, teacher-forced, beside
chance, and ``argument_copy`` the copying of argument values, split by whether their tokens occur
in the prompt.
"""
from __future__ import annotations

import json
import re
import threading
from collections import Counter, defaultdict

from llmkit.chat.tools import ToolArgumentsError, tools_by_name, validate_arguments
from llmkit.chat.template import render
from llmkit.course.lookups import token_positions
from llmkit.course.skills import EVAL_SPLITS, KINDS, SkillConversation, make_skills
from llmkit.course.toolgen import value_at

SCORES = ("tool_call_valid", "calls_made", "right_tool", "args_exact", "answer_from_result", "ends_turn",
          "no_invention", "memory", "tools_named")
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def calls_in(transcript: list[dict]) -> list[dict]:
    """Every tool call the assistant wrote, client and server, in order."""
    return [b for m in transcript if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"] if b["type"] in ("tool_use", "server_tool_use")]


def results_in(transcript: list[dict]) -> list[dict]:
    """Every tool result the harness or the client sent back, in order."""
    found = []
    for m in transcript:
        if isinstance(m["content"], list):
            found += [b for b in m["content"] if b["type"] in ("tool_result", "server_tool_result")]
    return found


def final_text(transcript: list[dict]) -> str:
    """The text of the last assistant message."""
    replies = [m for m in transcript if m["role"] == "assistant"]
    if not replies:
        return ""
    content = replies[-1]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content if b["type"] == "text")


def same_value(a, b) -> bool:
    """Equal as JSON values, type included (True is not 1, 3 is not 3.0)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def tool_call_valid(spec: SkillConversation, transcript: list[dict]) -> bool | None:
    calls = calls_in(transcript)
    if not spec.expected.calls and not calls:
        return None
    offered = tools_by_name(spec.tools)
    for call in calls:
        if "error" in call or call.get("name") not in offered:
            return False
        try:
            validate_arguments(offered[call["name"]], call["input"])
        except ToolArgumentsError:
            return False
    return bool(calls)


def calls_made(spec: SkillConversation, transcript: list[dict]) -> bool | None:
    return len(calls_in(transcript)) >= len(spec.expected.calls) if spec.expected.calls else None


def right_tool(spec: SkillConversation, transcript: list[dict]) -> bool:
    names = [c.get("name") for c in calls_in(transcript)]
    return names == [name for name, _ in spec.expected.calls]


def args_exact(spec: SkillConversation, transcript: list[dict]) -> bool | None:
    if not spec.expected.calls:
        return None
    calls = calls_in(transcript)
    return len(calls) == len(spec.expected.calls) and all(
        call.get("name") == name and same_value(call.get("input"), tool_input)
        for call, (name, tool_input) in zip(calls, spec.expected.calls))


def answer_from_result(spec: SkillConversation, transcript: list[dict]) -> bool | None:
    if not spec.expected.calls:
        return None
    results = results_in(transcript)
    if len(results) < len(spec.expected.answer_paths) or any(r["is_error"] for r in results):
        return False
    text = final_text(transcript)
    for result, path in zip(results, spec.expected.answer_paths):
        try:
            value = value_at(json.loads(result["content"]), path)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, StopIteration):
            return False  # the model ran something whose result has another shape: not the expected result
        if str(value) not in text:
            return False
    return True


def repeats(text: str, n_words: int = 3, times: int = 4) -> bool:
    """True when some ``n_words``-word sequence occurs ``times`` times or more: the sign of a loop."""
    words = text.split()
    grams = Counter(tuple(words[i:i + n_words]) for i in range(len(words) - n_words + 1))
    return any(count >= times for count in grams.values())


def ends_turn(spec: SkillConversation, transcript: list[dict], stop_reason: str) -> bool:
    text = " ".join(final_text([m]) for m in transcript if m["role"] == "assistant")
    return stop_reason == "end_turn" and not repeats(text)


def no_invention(spec: SkillConversation, transcript: list[dict], stop_reason: str) -> bool | None:
    if not spec.expected.no_invention:
        return None
    said = " ".join(m["content"] for m in spec.prompt if m["role"] == "user" and isinstance(m["content"], str))
    invented = set(NUMBER.findall(final_text(transcript))) - set(NUMBER.findall(said))
    return stop_reason == "end_turn" and not calls_in(transcript) and not invented


def memory(spec: SkillConversation, transcript: list[dict]) -> bool | None:
    if spec.expected.name is None:
        return None
    return spec.expected.name in final_text(transcript)


def tools_named(spec: SkillConversation, transcript: list[dict]) -> bool | None:
    """The ``which`` kind: does the reply name the tool for every thing asked (and call none)?"""
    if "names" not in spec.expected.facts:
        return None
    text = final_text(transcript)
    return not calls_in(transcript) and all(name in text for name in spec.expected.facts["names"])


def score(spec: SkillConversation, transcript: list[dict], stop_reason: str) -> dict[str, bool | None]:
    """Every score of one conversation (``None`` where a score does not apply)."""
    return {"tool_call_valid": tool_call_valid(spec, transcript), "calls_made": calls_made(spec, transcript),
            "right_tool": right_tool(spec, transcript),
            "args_exact": args_exact(spec, transcript), "answer_from_result": answer_from_result(spec, transcript),
            "ends_turn": ends_turn(spec, transcript, stop_reason),
            "no_invention": no_invention(spec, transcript, stop_reason), "memory": memory(spec, transcript),
            "tools_named": tools_named(spec, transcript)}


def fractions(rows: list[dict[str, bool | None]]) -> dict[str, float | int]:
    """Each score's fraction over the rows it applies to, and ``n_<score>``: how many that was."""
    out: dict[str, float | int] = {}
    for name in SCORES:
        applicable = [r[name] for r in rows if r.get(name) is not None]
        if applicable:
            out[name] = round(sum(applicable) / len(applicable), 4)
            out[f"n_{name}"] = len(applicable)
    return out


def run_one(client, spec: SkillConversation, *, max_tokens: int = 96, max_iterations: int = 4,
            constrain_tools: bool | str = True):
    """Replay one conversation through the harness greedily: (transcript after the prompt, stop reason).
    ``constrain_tools`` is the client's: False turns constrained decoding off (what the model writes
    alone), "per_token" chooses the tool's name token by token instead of whole."""
    from llmkit.chat.agent import run_agent
    from llmkit.chat.client import ContextWindowError

    prompt = spec.prompt
    try:
        result = run_agent(client, prompt, spec.tools, max_iterations=max_iterations, max_tokens=max_tokens,
                           system=spec.system, temperature=0.0, cache=False, constrain_tools=constrain_tools)
    except ContextWindowError:
        return [], "context_window"
    # the loop's own reason when it ended early (context window, iteration limit), else the reply's
    answered = result.stop_reason == "answered" and result.final is not None
    return result.transcript[len(prompt):], result.final.stop_reason if answered else result.stop_reason


def evaluate_skills(client, *, per_kind: int = 100, splits=EVAL_SPLITS, kinds=KINDS, seed: int = 0,
                    max_tokens: int = 96, progress=None, batch: int = 1,
                    constrain_tools: bool | str = True) -> dict[str, dict]:
    """Per split: the fraction of each score over ``per_kind`` conversations of each kind, and per kind.

    ``progress``: an optional callable given the number of conversations done, for a progress bar.
    ``batch`` > 1 runs that many conversations at once through a batching engine over ``client``'s
    model (``batched_runs``): several times faster on a CPU, where decoding one sequence leaves the
    cores mostly idle. Greedy either way; a batched matmul can round the last bit of a logit
    differently, so a near-tie may rarely go the other way. ``constrain_tools=False`` scores what the
    model writes with the client's constrained decoding off (no valid-call mask, no whole-name choice).
    """
    specs = {split: {kind: make_skills(per_kind, split=split, seed=seed, kinds=[kind]) for kind in kinds}
             for split in splits}
    flat = [spec for by_kind in specs.values() for kind_specs in by_kind.values() for spec in kind_specs]
    if batch > 1:
        outcomes = batched_runs(client, flat, batch=batch, max_tokens=max_tokens, progress=progress,
                                constrain_tools=constrain_tools)
    else:
        outcomes = []
        for spec in flat:
            outcomes.append(run_one(client, spec, max_tokens=max_tokens, constrain_tools=constrain_tools))
            if progress is not None:
                progress(len(outcomes))
    rows = iter(score(spec, *outcome) for spec, outcome in zip(flat, outcomes))
    report: dict[str, dict] = {}
    for split, by_kind in specs.items():
        scored = {kind: [next(rows) for _ in kind_specs] for kind, kind_specs in by_kind.items()}
        every = [row for kind_rows in scored.values() for row in kind_rows]
        report[split] = {**fractions(every), "kinds": {k: fractions(v) for k, v in scored.items()}}
    return report


def batched_runs(client, specs: list[SkillConversation], *, batch: int, max_tokens: int = 96,
                 progress=None, constrain_tools: bool | str = True) -> list[tuple[list[dict], str]]:
    """``run_one`` for every spec, ``batch`` at a time: one thread per conversation, all decoding
    together in one ``llmkit.serve.engine.Engine`` (as a server runs concurrent requests)."""
    from concurrent.futures import ThreadPoolExecutor

    from llmkit.chat.client import Client
    from llmkit.serve.engine import Engine
    from llmkit.serve.paged import block_bytes

    config, block = client.model.config, 16
    blocks_per_sequence = -(-config.context_length // block) + 1
    kv_mb = batch * blocks_per_sequence * block_bytes(config, block, client.model.embed.weight.dtype) / 2**20
    engine = Engine(client.model, max_batch=batch, kv_cache_mb=kv_mb, block_size=block, max_waiting=len(specs) + 1,
                    decode_threads=None)
    done, lock = [0], threading.Lock()

    def run(spec: SkillConversation):
        own = Client.from_model(client.model, client.tokenizer)  # one client per conversation, as a server does
        own.token_stream = engine.stream
        outcome = run_one(own, spec, max_tokens=max_tokens, constrain_tools=constrain_tools)
        if progress is not None:
            with lock:
                done[0] += 1
                progress(done[0])
        return outcome

    try:
        with ThreadPoolExecutor(batch, thread_name_prefix="llmkit-eval") as pool:
            return list(pool.map(run, specs))
    finally:
        engine.close()


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
