"""The harness at its limits, measured in one run: the context policy and the tool-call constraint.

    python benchmarks/chat_limits.py             # about two minutes on 2 CPU cores (the turn-by-turn reference)

Prints, side by side and as ratios:
  * ``drop_oldest`` on a 2,000-turn conversation in a 256-token window: ``fit_context`` (one render,
    then the cut read off ``Rendered.message_starts``) vs the obvious way, dropping the oldest turn
    and rendering again until the prompt fits; and whether both keep the same messages;
  * a tool whose argument is an enum of 50,000 values: building ``ToolCallConstraint`` (a byte trie
    over the encoded values) and walking one call through it, token by token.
Timings are single runs; on a shared, busy machine they move by 10-30 % or more.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmkit.chat.constrained import ToolCallConstraint  # noqa: E402
from llmkit.chat.context import fit_context, next_turn_start  # noqa: E402
from llmkit.chat.template import render  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.tokens.tokenizer import Tokenizer  # noqa: E402

WINDOW, TURNS, ENUM_VALUES = 256, 2000, 50_000


def turn_by_turn(render_kept, messages: list[dict]) -> list[dict]:
    """The obvious policy: drop the oldest turn, render again, repeat (quadratic in the turns)."""
    while len(render_kept(messages)) > WINDOW - 1:
        messages = messages[next_turn_start(messages):]
    return messages


def timed(function, *args):
    started = time.perf_counter()
    value = function(*args)
    return time.perf_counter() - started, value


def main() -> None:
    tokenizer = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    messages = []
    for turn in range(TURNS):
        messages += [{"role": "user", "content": f"question {turn}"}, {"role": "assistant", "content": f"answer {turn}"}]
    messages.append({"role": "user", "content": "the newest question"})

    def render_kept(kept):
        return render(tokenizer, kept, system="Be brief.")

    ours, (kept, _, _) = timed(fit_context, render_kept, messages, WINDOW, "drop_oldest")
    naive, expected = timed(turn_by_turn, render_kept, messages)
    print(f"drop_oldest, {TURNS} turns into {WINDOW} tokens: fit_context {ours:.2f} s, turn by turn {naive:.2f} s "
          f"({naive / ours:.0f}x); same messages kept: {kept == expected}")

    values = [f"city-{i:05d}" for i in range(ENUM_VALUES)]
    tool = {"name": "pick", "description": "Pick a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": values}},
                             "required": ["city"]}}
    build, constraint = timed(ToolCallConstraint, tokenizer, [tool])
    call = tokenizer.encode('{"name": "pick", "input": {"city": "city-31337"}}')

    def walk():
        constraint.advance(tokenizer.special_tokens["<|tool_call|>"])
        for token in call:
            assert constraint.allowed()[token]
            constraint.advance(token)
        return constraint.allowed()[tokenizer.special_tokens["<|end_tool_call|>"]].item()

    steps, complete = timed(walk)
    print(f"enum of {ENUM_VALUES} values: build {build:.2f} s, {len(call)}-token call walked in {steps:.3f} s; "
          f"the call may end there: {complete}")


if __name__ == "__main__":
    main()
