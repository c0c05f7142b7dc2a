"""Held-out evaluations of a chat model: does it call tools right, answer from their results,
remember the history, and refuse to invent what it cannot know?

Each held-out conversation (``llmkit.course.conversations``, cities, names, words and numbers the
model never trained on) is replayed the way a harness runs it, through ``llmkit.chat.agent.run_agent``
on a ``Client``: the assistant's turn is generated greedily, and when it stops with ``tool_use`` the
real tool runs and its result is sent back, until the model ends its turn. The transcript is then scored with four plain functions, one per question:

- ``tool_call_valid``: the first call names the expected tool and its arguments parse and
  validate against the tool's JSON schema (tool conversations: weather, letters, arithmetic);
- ``answer_consistent``: the final answer carries the value the tool actually returned, every
  number in it comes from the tool result or the question, and umbrella advice follows the
  chance of rain (same conversations; no successful tool result means not consistent);
- ``memory``: the final answer names the user, whose name is only in the re-sent history;
- ``no_invention``: asked for weather or the time with no tool for it, the model ends its turn
  with an answer that holds no digit (rambling until max_tokens is no answer).

``--kinds repeat`` adds a probe that is not one of the four: ``repeat_exact``, the list of 3-6
held-out words said back exactly (copying, the skill the memory answer rests on).

    python -m llmkit evals --model data/models/chat --json

``--tool-call-validity`` prints instead how often a sampled tool call cannot be run, with
constrained decoding off and on (``llmkit.course.call_failures.tool_call_validity``):

    python -m llmkit evals --model chat --tool-call-validity > data/models/chat/tool_call_validity.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field

import torch

from llmkit.chat.agent import run_agent
from llmkit.chat.client import Client
from llmkit.chat.tools import ToolArgumentsError, tools_by_name, validate_arguments
from llmkit.chat.trace import Trace
from llmkit.course.call_failures import VALIDITY_TEMPERATURES, tool_call_validity_table
from llmkit.course.conversation_data import UMBRELLA_FROM_PERCENT, Conversation
from llmkit.course.conversations import TOOL_KINDS, make_conversations
from llmkit.course.skill_scores import evaluate_skills
from llmkit.course.tools import EXAMPLE_TOOLS, offered_tools
from llmkit.model.transformer import Transformer

EVAL_KINDS = (*TOOL_KINDS, "memory", "no_tool")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass
class Transcript:
    """What the model did in one conversation: every assistant turn's blocks, the tool results it
    got back, the text of its final answer, why each turn stopped, and the tokens it wrote."""

    turns: list[list[dict]] = field(default_factory=list)
    tool_results: list[dict] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)
    output_tokens: int = 0

    @property
    def tool_calls(self) -> list[dict]:
        return [b for turn in self.turns for b in turn if b["type"] == "tool_use"]

    @property
    def final_text(self) -> str:
        """The text blocks of the last turn (what the user reads); '' if it ended in a tool call."""
        if not self.turns:
            return ""
        return "".join(b["text"] for b in self.turns[-1] if b["type"] == "text")


# ------------------------------------------------------------------------------------ the harness
def run_conversation(model: Transformer, tokenizer, messages: list[dict], *, tools=None, system=None,
                     max_tool_calls: int = 2, max_new_tokens: int = 96) -> Transcript:
    """Play the assistant from ``messages`` (ending with a user question), greedily, running tools.

    This is ``run_agent`` on a ``Client``, the one harness loop of the package, with greedy
    decoding, no prompt cache and no constrained decoding (the evals measure what the model writes
    on its own). Only tools that were offered can run: a call to any other comes back as an error
    result, as it would from a real harness. Stops after ``max_tool_calls`` calls, or with stop
    reason "context_window" when the conversation no longer fits the model's context.
    ``output_tokens`` counts every token the model wrote, also of a reply the loop asked for again.
    """
    client, trace = Client.from_model(model, tokenizer), Trace()
    run = run_agent(client, list(messages), offered_tools(tools), max_iterations=max_tool_calls + 1, trace=trace,
                    system=system, max_tokens=max_new_tokens, temperature=0, cache=False, constrain_tools=False)
    written = run.transcript[len(messages):]
    turns = [message["content"] for message in written if message["role"] == "assistant"]
    results = [block for message in written if message["role"] == "user" for block in message["content"]
               if block.get("type") == "tool_result"]
    stop_reasons = ["tool_use"] * (len(turns) - 1) + ([run.final.stop_reason] if turns else [])  # on after calls
    if run.stop_reason == "context_window":  # the next request could not fit, even with room made
        stop_reasons.append("context_window")
    return Transcript(turns, results, stop_reasons, trace.bill().output_tokens)


# ------------------------------------------------------------------------------------- the scores
def tool_call_valid(call: dict | None, expected_tool: str) -> bool:
    """The call names ``expected_tool`` and its arguments are a JSON object valid for its schema."""
    if call is None or "error" in call or call.get("name") != expected_tool:
        return False
    tool = tools_by_name(EXAMPLE_TOOLS)[expected_tool]
    try:
        validate_arguments(tool, call["input"])
    except ToolArgumentsError:
        return False
    return True


def numbers_in(text: str) -> list[str]:
    return NUMBER.findall(text)


def answer_consistent(kind: str, question: str, answer: str, tool_result: dict | None) -> bool:
    """Is ``answer`` what the tool result says?

    The key value (weather: the chance of rain; letters: the count; arithmetic: the result) must
    appear as a number in the answer, every number in the answer must come from the tool result or
    the question, and for weather the umbrella advice (if any) must follow the chance of rain.
    """
    if tool_result is None or tool_result.get("is_error"):
        return False
    content = tool_result["content"]
    said = numbers_in(answer)
    allowed = set(numbers_in(content)) | set(numbers_in(question))
    if kind == "weather":
        try:
            chance = json.loads(content)["chance_of_rain_percent"]
        except (ValueError, KeyError, TypeError):
            return False
        key = str(chance)
        lowered = answer.lower()
        says_yes = "take an umbrella" in lowered and not lowered.startswith("no")
        says_no = "no umbrella" in lowered or "don't need" in lowered
        if (says_yes or says_no) and says_yes != (chance >= UMBRELLA_FROM_PERCENT):
            return False
    else:
        key = content.strip()
    return key in said and all(n in allowed for n in said)


def names_user(answer: str, name: str) -> bool:
    """The answer holds ``name`` as a whole word."""
    return re.search(rf"\b{re.escape(name)}\b", answer) is not None


def invents_number(answer: str) -> bool:
    """Any digit in an answer that had no source for a number is an invented number."""
    return any(ch.isdigit() for ch in answer)


def score(conversation: Conversation, transcript: Transcript) -> dict[str, bool]:
    """The scores that apply to one conversation's kind."""
    kind, expected = conversation.kind, conversation.expected
    if kind in TOOL_KINDS:
        calls = transcript.tool_calls
        good_results = [r for r in transcript.tool_results if not r["is_error"]]
        question = conversation.prompt[-1]["content"]
        return {"tool_call_valid": tool_call_valid(calls[0] if calls else None, expected.tool),
                "tool_args_exact": bool(calls) and calls[0].get("input") == expected.tool_input,
                "answer_consistent": answer_consistent(kind, question, transcript.final_text,
                                                       good_results[-1] if good_results else None)}
    if kind == "memory":
        return {"memory": names_user(transcript.final_text, expected.facts["name"])}
    if kind == "repeat":  # not one of the four: a probe of copying, the skill memory rests on
        return {"repeat_exact": transcript.final_text.strip() == " ".join(expected.facts["items"])}
    if kind == "no_tool":
        finished = bool(transcript.stop_reasons) and transcript.stop_reasons[-1] == "end_turn"
        return {"no_invention": finished and bool(transcript.final_text.strip())
                and not invents_number(transcript.final_text)}
    return {}


# ------------------------------------------------------------------------------------------- runs
def evaluate(model: Transformer, tokenizer, *, limit: int = 24, seed: int = 0, kinds=EVAL_KINDS,
             examples: list | None = None) -> dict:
    """Score ``limit`` held-out conversations of each kind; returns fractions, counts and examples.

    A fraction is over the conversations it applies to (``n_<score>`` says how many).
    ``examples`` (a list) collects one dict per conversation: prompt, transcript, scores.
    """
    started = time.perf_counter()
    model.eval()
    totals: dict[str, list[bool]] = {}
    output_tokens, n_conversations = 0, 0
    with torch.no_grad():
        for kind in kinds:
            for conversation in make_conversations(limit, split="heldout", seed=seed, kinds=[kind]):
                transcript = run_conversation(model, tokenizer, conversation.prompt, tools=conversation.tools,
                                              system=conversation.system)
                output_tokens += transcript.output_tokens
                n_conversations += 1
                scores = score(conversation, transcript)
                for name, value in scores.items():
                    totals.setdefault(name, []).append(value)
                if examples is not None:
                    examples.append({"kind": kind, "question": conversation.prompt[-1]["content"],
                                     "turns": transcript.turns, "stop_reasons": transcript.stop_reasons,
                                     "scores": scores})
    result: dict = {name: round(sum(v) / len(v), 4) for name, v in totals.items()}
    result.update({f"n_{name}": len(v) for name, v in totals.items()})
    result.update(limit_per_kind=limit, seed=seed, conversations=n_conversations,
                  mean_output_tokens=round(output_tokens / max(1, n_conversations), 1),
                  seconds=round(time.perf_counter() - started, 1))
    return result


CONSTRAIN_TOOLS = {"on": True, "per_token": "per_token", "copy": "copy", "off": False}  # --constrain-tools


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llmkit evals",
                                     description="Held-out evaluation of a chat model (greedy, real tools).")
    parser.add_argument("--limit", type=int, default=24, help="held-out conversations per kind (default 24)")
    parser.add_argument("--seed", type=int, default=0, help="which held-out conversations (default 0)")
    parser.add_argument("--kinds", nargs="+", default=list(EVAL_KINDS), metavar="KIND",
                        help=f"conversation kinds to score (default: {' '.join(EVAL_KINDS)}; 'repeat' probes copying)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (else a short table)")
    parser.add_argument("--examples", help="also write every transcript to this JSON file")
    parser.add_argument("--tool-call-validity", action="store_true",
                        help="instead, print (JSON) how often sampled tool calls are invalid, constrained decoding "
                             f"off and on, at temperatures {', '.join(map(str, VALIDITY_TEMPERATURES))}")
    parser.add_argument("--n", type=int, default=48, help="conversations per setting for --tool-call-validity")
    parser.add_argument("--skills", action="store_true",
                        help="instead, print (JSON) the skill scores (llmkit.course.skills) on the three held-out "
                             "splits, seen, unseen_values and unseen_phrasings_and_tools, --limit per kind")
    parser.add_argument("--constrain-tools", choices=list(CONSTRAIN_TOOLS), default="on",
                        help="with --skills, the client's constrained decoding of tool calls: on (the default: "
                             "valid calls, the tool's name chosen whole), per_token, copy (each argument value "
                             "chosen whole among the conversation's words and numbers) or off")
    from llmkit.model.weights import add_model_arguments, load_model_from_arguments

    add_model_arguments(parser)
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    model, tokenizer = load_model_from_arguments(args)
    if args.tool_call_validity:
        if args.n < 1:
            parser.error("--n must be at least 1")
        rows = tool_call_validity_table(model, tokenizer, n=args.n, seed=args.seed)
        command = f"python -m llmkit evals --model {args.model} --tool-call-validity --n {args.n} --seed {args.seed}"
        print(json.dumps({"command": command, "model": args.model, "rows": rows}, indent=1))
        return
    if args.skills:
        started = time.perf_counter()
        report = evaluate_skills(Client.from_model(model, tokenizer), per_kind=args.limit, seed=args.seed,
                                 constrain_tools=CONSTRAIN_TOOLS[args.constrain_tools])
        command = (f"python -m llmkit evals --model {args.model} --skills --limit {args.limit} --seed {args.seed} "
                   f"--constrain-tools {args.constrain_tools}")
        print(json.dumps({"command": command, "model": args.model, "per_kind": args.limit,
                          "seconds": round(time.perf_counter() - started, 1), **report}, indent=1))
        return
    examples: list | None = [] if args.examples else None
    result = {"model": args.model, **evaluate(model, tokenizer, limit=args.limit, seed=args.seed, kinds=args.kinds,
                                              examples=examples)}
    if args.examples:
        with open(args.examples, "w", encoding="utf-8") as f:
            json.dump(examples, f, indent=1, ensure_ascii=False)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}  {value}", file=sys.stdout)
