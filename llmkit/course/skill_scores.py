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
- ``memory``: the final text holds the name the user gave, exactly;
- ``greets_by_name``: the same conversation cut after the introduction, the model's own first
  reply holds the name. ``memory`` replays the right greeting as history; a model talking to a
  learner has to write it, and a greeting without the name leaves the later answer nothing to copy.
  Like ``memory`` it only asks for the name, so a refusal that echoes it counts: an upper bound.

``evaluate_skills`` runs a model through ``Client`` + ``run_agent`` greedily on each split, with
the client's default decoding (a tool call is kept valid, and the tool's name chosen whole).
``llmkit.course.forced_scores`` measures single skills teacher-forced instead.
"""
from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import replace

from llmkit.chat.tools import ToolArgumentsError, tools_by_name, validate_arguments
from llmkit.course.skills import EVAL_SPLITS, KINDS, SkillConversation, make_skills
from llmkit.course.toolgen import value_at

SCORES = ("tool_call_valid", "calls_made", "right_tool", "args_exact", "answer_from_result", "ends_turn",
          "no_invention", "memory", "greets_by_name", "tools_named")
INTRODUCING_KINDS = ("memory", "memory_open")  # their first reply is scored too: greets_by_name
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


def introduction(spec: SkillConversation) -> SkillConversation:
    """A memory conversation cut after its first reply, the greeting: what ``greets_by_name`` scores."""
    return replace(spec, messages=spec.messages[:2])


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
    introduced = [i for i, spec in enumerate(flat) if spec.kind in INTRODUCING_KINDS]
    runs = flat + [introduction(flat[i]) for i in introduced]  # ``conversations_run`` counts these
    if batch > 1:
        outcomes = batched_runs(client, runs, batch=batch, max_tokens=max_tokens, progress=progress,
                                constrain_tools=constrain_tools)
    else:
        outcomes = []
        for spec in runs:
            outcomes.append(run_one(client, spec, max_tokens=max_tokens, constrain_tools=constrain_tools))
            if progress is not None:
                progress(len(outcomes))
    scores = [score(spec, *outcome) for spec, outcome in zip(flat, outcomes)]
    for i, (greeting, _) in zip(introduced, outcomes[len(flat):]):
        scores[i]["greets_by_name"] = memory(flat[i], greeting)
    rows = iter(scores)
    report: dict[str, dict] = {}
    for split, by_kind in specs.items():
        scored = {kind: [next(rows) for _ in kind_specs] for kind, kind_specs in by_kind.items()}
        every = [row for kind_rows in scored.values() for row in kind_rows]
        report[split] = {**fractions(every), "kinds": {k: fractions(v) for k, v in scored.items()}}
    return report


def conversations_run(kinds, splits=EVAL_SPLITS, per_kind: int = 100) -> int:
    """How many replays ``evaluate_skills`` makes (its ``progress`` counts to this): one per
    conversation, and one more for each introduction."""
    return len(splits) * per_kind * sum(1 + (kind in INTRODUCING_KINDS) for kind in kinds)


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
