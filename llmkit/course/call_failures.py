"""How often a model's tool call cannot be run, and why: the two ways of writing a call, measured.

- ``react_parse_failures``: the legacy ReAct text protocol (``llmkit.course.react``). The model
  writes "Action: tool(args)" as plain text and the harness parses it; ``ParseFailure`` says why
  a step could not be parsed.

      python -m llmkit react --model chat --json

- ``tool_call_validity``: structured calls in the chat template, with constrained decoding
  (``llmkit.chat.constrained``) off and on; ``call_problem`` says why a call cannot be run.

      python -m llmkit evals --model chat --tool-call-validity > data/models/chat/tool_call_validity.json

Both sample (seeded) rather than decode greedily: a failure rate is a property of the distribution
the model writes from, and sampling at a few temperatures shows how it grows with randomness.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from llmkit.chat.client import Client
from llmkit.chat.template import render, stop_tokens
from llmkit.chat.tools import Tool, ToolArgumentsError, run_tool_call, tools_by_name, validate_arguments
from llmkit.checks import check_int
from llmkit.course.conversations import TOOL_KINDS, make_conversations
from llmkit.course.react import STOP_SEQUENCE, TEMPERATURES, ParseFailure, parse_action
from llmkit.course.tools import EXAMPLE_TOOLS, offered_tools
from llmkit.generation.generate import generate
from llmkit.generation.sampling import SamplingParams
from llmkit.model.transformer import Transformer


# ------------------------------------------------------------------------------------------ ReAct
def react_parse_failures(model: Transformer, tokenizer, *, temperature: float, n: int = 48, seed: int = 0,
                         max_new_tokens: int = 64, examples: list | None = None) -> dict:
    """How often the model's first ReAct step can't be run, and why (the legacy text protocol, ``llmkit.course.react``).

    For ``n`` held-out ``react`` conversations the model writes its first turn after the question,
    sampled at ``temperature`` (seeded), until the stop sequence "Observation:" or the end of its
    turn; ``parse_action`` then reads the Action against the tools the prompt listed. ``by_reason``
    is the fraction of replies that failed for each ``ParseFailure``: they add up to
    ``parse_failure_rate``. ``examples`` (a list) collects each reply with its verdict.

        python -m llmkit react --model chat --json
    """
    check_int("n", n, minimum=1)
    sampling, stops = SamplingParams(temperature=temperature), stop_tokens(tokenizer)
    failures = {reason.value: 0 for reason in ParseFailure}
    stop_reasons: dict[str, int] = {}
    output_tokens, started = 0, time.perf_counter()
    model.eval()
    with torch.no_grad():
        for i, conversation in enumerate(make_conversations(n, split="heldout", seed=seed, kinds=["react"])):
            prompt = render(tokenizer, conversation.prompt, system=conversation.system).ids
            room = min(max_new_tokens, model.config.context_length - len(prompt))
            generation = generate(model, prompt, max_new_tokens=room, sampling=sampling, stop_tokens=stops.end_turn,
                                  tool_stop_tokens=stops.tool_use, stop_sequences=[STOP_SEQUENCE],
                                  tokenizer=tokenizer, seed=seed * 1_000_003 + i)
            listed = [t for t in EXAMPLE_TOOLS if t.name in conversation.expected.facts["tools"]]
            action = parse_action(generation.text, listed)
            if not action.ok:
                failures[action.failure.value] += 1
            stop_reasons[generation.stop_reason] = stop_reasons.get(generation.stop_reason, 0) + 1
            output_tokens += len(generation.tokens)
            if examples is not None:
                examples.append({"question": conversation.prompt[-1]["content"], "reply": generation.text,
                                 "stop_reason": generation.stop_reason,
                                 "failure": None if action.ok else action.failure.value, "detail": action.detail,
                                 "name": action.name, "arguments": action.arguments})
    return {"temperature": temperature, "n": n, "seed": seed,
            "parse_failure_rate": round(sum(failures.values()) / n, 4),
            "by_reason": {reason: round(count / n, 4) for reason, count in failures.items()},
            "stop_reasons": stop_reasons, "mean_output_tokens": round(output_tokens / n, 1),
            "seconds": round(time.perf_counter() - started, 1)}


# ----------------------------------------------------------------------------- constrained decoding
INVALID_CALL_REASONS = ("not_json", "unfinished", "unknown_tool", "bad_arguments")
VALIDITY_TEMPERATURES = (0.7, 1.0, 1.5)


def call_problem(call: dict, stop_reason: str, offered: dict) -> str | None:
    """Why a ``tool_use`` block from ``parse_assistant`` could not be run, or None if it can:
    "unfinished" (the turn ended before ``<|end_tool_call|>``: another stop token, or a full
    context window), "not_json" (not JSON, or not ``{"name": ..., "input": {...}}``),
    "unknown_tool" (not one of ``offered``, name -> Tool) or "bad_arguments" (the input breaks
    the tool's schema)."""
    if stop_reason != "tool_use":
        return "unfinished"
    if "error" in call:
        return "not_json"
    if call["name"] not in offered:
        return "unknown_tool"
    try:
        validate_arguments(offered[call["name"]], call["input"])
    except ToolArgumentsError:
        return "bad_arguments"
    return None


VALIDITY_MAX_TOKENS = 256  # a call still open after this many tokens is a runaway, not a long call


def tool_call_validity(model: Transformer, tokenizer, *, constrained: bool, temperature: float, n: int = 48,
                       seed: int = 0, max_tokens: int = VALIDITY_MAX_TOKENS, examples: list | None = None) -> dict:
    """How often a sampled tool call cannot be run, with constrained decoding off or on.

    For ``n`` held-out tool conversations (weather, letters, arithmetic) the model writes its first
    assistant turn, sampled at ``temperature`` (seeded per conversation, the same seeds with the
    constraint off and on), with ``max_tokens`` as its budget (or the rest of the context window,
    if that is less): a call still open after that many tokens is a runaway, and sampling it
    to the end of a long window would only cost time. ``invalid_rate`` is
    the fraction of turns whose tool call cannot be run, ``by_reason`` splits it by
    ``call_problem`` (the reasons add up to it), and ``calls`` counts the turns that made a call.
    With ``constrained`` every call is decoded under ``ToolCallConstraint``: only a call cut off by
    the budget can still be invalid ("unfinished"). ``examples`` (a list) collects one
    dict per conversation: the question, the first call (or None), the ``outcome`` ("valid", "no
    call" or the problem), what was asked, and ``harness_reply``, the error result a harness would
    send back for a call it cannot run.

        python -m llmkit evals --model chat --tool-call-validity
    """
    check_int("n", n, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    client = Client.from_model(model, tokenizer)
    problems = dict.fromkeys(INVALID_CALL_REASONS, 0)
    calls, output_tokens, started = 0, 0, time.perf_counter()
    model.eval()
    with torch.no_grad():
        for i, conversation in enumerate(make_conversations(n, split="heldout", seed=seed, kinds=TOOL_KINDS)):
            tools = offered_tools(conversation.tools)
            reply = client.messages.create(messages=conversation.prompt, tools=tools, system=conversation.system,
                                           max_tokens=max_tokens, temperature=temperature,
                                           seed=seed * 1_000_003 + i, cache=False, constrain_tools=constrained)
            output_tokens += reply.usage.output_tokens
            call = reply.tool_calls[0] if reply.tool_calls else None
            problem = None if call is None else call_problem(call, reply.stop_reason, tools_by_name(tools))
            calls += call is not None
            if problem is not None:
                problems[problem] += 1
            if examples is not None:
                examples.append({"question": conversation.prompt[-1]["content"], "call": call,
                                 "outcome": "no call" if call is None else problem or "valid",
                                 "asked": conversation.expected.tool_input,
                                 "harness_reply": None if problem is None else _harness_reply(call, tools)})
    return {"constrained": constrained, "temperature": temperature, "n": n, "seed": seed, "calls": calls,
            "invalid_rate": round(sum(problems.values()) / n, 4),
            "by_reason": {reason: round(count / n, 4) for reason, count in problems.items()},
            "mean_output_tokens": round(output_tokens / n, 1), "seconds": round(time.perf_counter() - started, 1)}


def _harness_reply(call: dict, tools: list[Tool]) -> str:
    """What a harness sends back for a call it cannot run: the template's parse error, or the error
    ``run_tool_call`` gives (unknown tool, bad arguments)."""
    if "error" in call:
        return call["error"]
    return run_tool_call(tools, call["name"], call["input"], tool_use_id=call["id"])["content"]


def tool_call_validity_table(model: Transformer, tokenizer, *, n: int = 48, seed: int = 0) -> list[dict]:
    """``tool_call_validity`` with the constraint off and on, at each of ``VALIDITY_TEMPERATURES``."""
    return [tool_call_validity(model, tokenizer, constrained=constrained, temperature=temperature, n=n, seed=seed)
            for temperature in VALIDITY_TEMPERATURES for constrained in (False, True)]


def react_main(argv: list[str] | None = None) -> None:
    """``python -m llmkit react``: the parse-failure rate of ReAct steps at each temperature."""
    parser = argparse.ArgumentParser(prog="python -m llmkit react",
                                     description="How often a chat model's ReAct Action cannot be parsed, by reason.")
    parser.add_argument("--n", type=int, default=48, help="held-out questions per temperature (default 48)")
    parser.add_argument("--seed", type=int, default=0, help="which questions, and the sampling seed (default 0)")
    parser.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES))
    parser.add_argument("--json", action="store_true", help="print one JSON object (else a short table)")
    from llmkit.model.weights import add_model_arguments, load_model_from_arguments

    add_model_arguments(parser)
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    model, tokenizer = load_model_from_arguments(args)
    runs = [react_parse_failures(model, tokenizer, temperature=t, n=args.n, seed=args.seed) for t in args.temperatures]
    if args.json:
        print(json.dumps({"model": args.model, "runs": runs}))
        return
    reasons = [reason.value for reason in ParseFailure]
    print(f"{'temperature':>11}  {'failed':>6}  " + "  ".join(reasons))
    for run in runs:
        cells = "  ".join(f"{run['by_reason'][r]:>{len(r)}.2f}" for r in reasons)
        print(f"{run['temperature']:>11}  {run['parse_failure_rate']:>6.2f}  {cells}")
