"""``llmkit`` (or ``python -m llmkit``): one command line for every stage that runs from a terminal.

Each subcommand lives beside the code it drives and is imported only when asked for, so
``llmkit env`` stays quick on a machine whose torch install is broken (the thing it checks).
"""
from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "env": ("llmkit.env", "check that this machine can run the course"),
    "train": ("llmkit.training.train", "pretrain a model from a JSON config"),
    "finetune": ("llmkit.course.recipe", "SFT or DPO on the course's conversations, from a JSON config"),
    "evals": ("llmkit.course.evals", "held-out evaluation of a chat model"),
    "react": ("llmkit.course.call_failures", "how often a ReAct step cannot be parsed"),
    "recipe": ("llmkit.course.recipe", "rebuild tokenizer, base and chat models end to end (resumable)"),
    "serve": ("llmkit.cli", "serve a model over the Anthropic and OpenAI APIs, batching requests"),
    "export": ("llmkit.model.export", "write a model as a Hugging Face folder (for vLLM, TGI, llama.cpp)"),
}
ENTRY_POINTS = {"react": "react_main", "serve": "serve_main", "recipe": "recipe_main"}  # commands whose function is not called ``main``


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items())
    return f"usage: llmkit COMMAND [options]\n\ncommands:\n{rows}\n\n`llmkit COMMAND --help` tells each one's options."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"llmkit: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    status = getattr(module, ENTRY_POINTS.get(name, "main"))(rest)
    return status if isinstance(status, int) else 0


def serve_main(argv: list[str]) -> int:
    """``llmkit serve``, with the course's web_search as the server tool (the serve floor sits below
    the course, so the tool is handed in from here)."""
    from llmkit.course.tools import web_search
    from llmkit.serve.command import main as serve

    return serve(argv, server_tools={"web_search": web_search})
