"""What a chat request gives back: the reply (``Message``), its pieces while streaming
(``ContentDelta``), and the error for a prompt that does not fit (``ContextWindowError``).

The shapes follow the Messages API: a reply is a list of content blocks ("text", "thinking",
"tool_use", "server_tool_use", "server_tool_result"), a stop reason, and a usage block
(``llmkit.generation.generate.Usage``, the one usage row of the package) priced into a ``Bill``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from llmkit.chat.trace import Bill
from llmkit.generation.generate import Usage


class ContextWindowError(ValueError):
    """The request does not fit the model's context window; ``over_by`` tokens too many."""

    def __init__(self, message: str, *, prompt_tokens: int, context_window: int):
        super().__init__(message)
        self.prompt_tokens, self.context_window = prompt_tokens, context_window
        self.over_by = prompt_tokens - (context_window - 1)


@dataclass
class Message:
    """The assistant's reply: content blocks, why it stopped, usage, cost and what was dropped.

    ``usage``: the prompt is ``input_tokens + cache_read_input_tokens``; ``output_tokens`` counts
    every generated token, thinking and the final stop token included."""

    id: str
    content: list[dict]
    stop_reason: str
    usage: Usage
    bill: Bill
    stop_sequence: str | None = None
    dropped: list[dict] = field(default_factory=list)  # messages the context policy left out
    role: str = "assistant"

    @property
    def cost(self) -> float:
        """Dollars, from the client's price table."""
        return self.bill.total

    @property
    def text(self) -> str:
        """The text blocks joined (thinking and tool calls left out)."""
        return "".join(block["text"] for block in self.content if block["type"] == "text")

    @property
    def tool_calls(self) -> list[dict]:
        """The client tool calls in the reply (``tool_use`` blocks), for your code to run."""
        return [block for block in self.content if block["type"] == "tool_use"]

    def to_param(self) -> dict:
        """The reply as a message to append to the history you send next time."""
        return {"role": "assistant", "content": copy.deepcopy(self.content)}


@dataclass(frozen=True)
class ContentDelta:
    """A piece of the reply while streaming: new ``text`` for block ``index`` of ``type``
    ("text", "thinking", "tool_use" or "server_tool_use", whose text is the raw JSON of the call,
    or "server_tool_result", the result of a server tool the client ran). With server tools
    offered, a call is streamed once its name is written, so its type says who will run it."""

    index: int
    type: str
    text: str
