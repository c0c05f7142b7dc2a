"""A Messages-style client for the course's chat model: render -> generate -> parse, with usage and cost.

This is the harness a hosted API runs for you, written out::

    client = Client()                      # loads data/models/chat
    reply = client.messages.create(messages=[{"role": "user", "content": "Weather in Pune?"}],
                                   tools=[get_weather], max_tokens=64)
    reply.content      # [{"type": "thinking", ...}, {"type": "tool_use", "name": "get_weather", ...}]
    reply.usage        # input_tokens, cache_read_input_tokens, output_tokens
    reply.cost         # dollars, from the price table

Each call is stateless: the whole conversation is rendered into one row of tokens
(``llmkit.chat.template``) and the model continues it (``llmkit.generation.generate``). Choices made here:

- **Context window.** The prompt must leave room for at least one new token. ``max_tokens`` is a
  budget, not a reservation: if the window fills first the reply stops with "context_window". A
  prompt that does not fit is a ``ContextWindowError``, or, with ``context_policy="drop_oldest"``,
  the oldest whole turns are dropped and ``Message.dropped`` lists them (``llmkit.chat.context``).
- **Thinking.** By default (``thinking=None`` or ``{"type": "enabled"}``) the model may write a
  thinking block first, as it was trained to. ``{"type": "disabled"}`` passes ``<|thinking|>``
  and ``<|end_thinking|>`` to ``generate`` as ``suppress_tokens`` (a score of minus infinity at
  every step), so no thinking block can open. (Prefilling an empty
  ``<|thinking|><|end_thinking|>``, as some open models do, only works for a model trained that
  way; the course model was not, and goes on thinking after it. Banned from thinking, it may
  still write its reasoning as plain text.) Thinking tokens are output tokens and billed so.
- **Stored conversations.** ``create(..., previous_id=reply.id)`` continues a conversation the
  client kept (what was sent, after any dropping, plus the reply), so the caller sends only the
  new message; system and tools are inherited unless given. The model still re-reads every
  token: ``usage`` shows it (as input, or as cache reads when the prompt cache has them).
- **Prompt caching.** With ``cache=True`` the engine's ``PrefixCache`` is shared across calls,
  so a prompt that starts like an earlier one (same system prompt and tools, same history)
  reuses its keys and values: ``usage.cache_read_input_tokens``. The reply is the same either way.
- **Valid tool calls.** With tools offered, ``constrain_tools=True`` (the default) decodes under
  ``llmkit.chat.constrained.ToolCallConstraint``: inside a tool call only tokens that keep it valid JSON
  for an offered tool's schema can be drawn, so every finished call parses and validates (one cut
  off by ``max_tokens`` is still cut off), and the tool's name is chosen whole, by the model's
  probability of each offered name (``llmkit.generation.choice``). ``constrain_tools="per_token"``
  masks the name token by token like the rest of the call; ``constrain_tools=False`` shows what the
  model writes on its own. ``constrain_tools="copy"`` also chooses every argument's value whole among
  the values the conversation holds (``llmkit.chat.value_copy``): a value is then always copied
  exactly, and a value nobody said cannot be written.
- **Server tools.** A ``Tool`` marked ``server`` (``web_search``) is run by the client itself when
  the model calls it, inside the same request (``llmkit.chat.server_tools``); ``usage`` counts every
  round, since the context is read again after each result. A client tool's call still ends the
  turn with "tool_use", for your code (or ``llmkit.chat.agent.run_agent``) to run.
- **Prefill.** A trailing assistant message is continued; the reply holds only the new blocks.
- **Sampling** defaults to temperature 1.0, as hosted APIs do; pass ``temperature=0`` for greedy.
"""
from __future__ import annotations

import copy
import functools
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from llmkit.chat import value_copy
from llmkit.chat.constrained import ToolCallConstraint
from llmkit.chat.context import check_context_policy, context_parts, fit_context
from llmkit.chat.message import ContentDelta, ContextWindowError, Message
from llmkit.chat.reply import Round, deltas, final_content, message_usage, record_round
from llmkit.chat.server_tools import (MAX_SERVER_CALLS, SERVER_LIMIT_ERROR, label_server_calls, run_server_call,
                                      server_call, server_tools)
from llmkit.chat.parse import parse_assistant
from llmkit.chat.template import Rendered, render, server_result_ids, stop_tokens
from llmkit.chat.trace import Bill, Prices, Trace
from llmkit.checks import check_bool, check_int
from llmkit.generation.generate import stream as generate_stream
from llmkit.generation.prefix_cache import PrefixCache
from llmkit.generation.request import check_stop_sequences
from llmkit.generation.sampling import SamplingParams

__all__ = ["Client", "Messages", "Message", "ContentDelta", "ContextWindowError", "MAX_SERVER_CALLS",
           "SERVER_LIMIT_ERROR"]
DEFAULT_PREFIX_CACHE_BYTES = 64 * 2**20


@dataclass
class _Request:
    system: str | None
    tools: list
    messages: list[dict]  # what is sent, after dropping
    dropped: list[dict]
    rendered: Rendered
    history_tokens: int
    max_tokens: int
    sampling: SamplingParams
    stop_sequences: tuple[str, ...]
    seed: int | None
    cache: bool
    prefilled: bool  # the last message is the assistant's own (continued, not answered)
    thinking: bool
    trace: Trace | None
    constraint: Any = None  # a function making a ToolCallConstraint per sample, or None


class Client:
    """Load a chat model once; talk to it through ``client.messages``.

    ``ids`` numbers the message and tool-call ids (``msg_0001``, ``toolu_0001``); pass one shared
    ``itertools.count(1)`` to several clients (a server makes one per request) so ids stay unique
    across them. By default each client counts from 1.
    """

    def __init__(self, model_dir=None, *, device=None, prices: Prices | None = None,
                 prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, ids: Iterator[int] | None = None):
        from llmkit.model.weights import load_model  # floor 3, loaded only when a client is made

        try:
            model, tokenizer = load_model("chat" if model_dir is None else model_dir, device=device)
        except FileNotFoundError as exc:
            if model_dir is not None:
                raise
            raise FileNotFoundError(f"{exc}. The chat model is not in data/models/chat yet: train it (see "
                                    f"data/README.md), or pass Client('base') to try the plumbing") from None
        self._setup(model, tokenizer, prices, prefix_cache_bytes, ids)

    @classmethod
    def from_model(cls, model, tokenizer, *, prices: Prices | None = None,
                   prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, ids: Iterator[int] | None = None) -> Client:
        """A client for a model already in memory (e.g. one you just trained)."""
        client = cls.__new__(cls)
        client._setup(model, tokenizer, prices, prefix_cache_bytes, ids)
        return client

    def _setup(self, model, tokenizer, prices, prefix_cache_bytes, ids=None) -> None:
        if prices is not None and not isinstance(prices, Prices):
            raise TypeError(f"prices must be an llmkit.chat.trace.Prices, got {type(prices).__name__}")
        self.model, self.tokenizer = model, tokenizer
        self.prices = prices or Prices()
        self.prefix_cache = PrefixCache(prefix_cache_bytes)
        # the token loop, with ``generate.stream``'s signature; a server swaps in its batching engine's.
        # Threads may share a client: each step of the loop (which runs the model and reads and
        # fills the prefix cache) holds the lock, so requests from several threads interleave safely.
        self.token_stream = _one_step_at_a_time(generate_stream, threading.RLock())
        self.stop_tokens = stop_tokens(tokenizer)
        self.conversations: dict[str, tuple[str | None, list, list[dict]]] = {}
        self._numbers = itertools.count(1) if ids is None else iter(ids)
        self.messages = Messages(self)

    @property
    def context_window(self) -> int:
        return self.model.config.context_length

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` costs when sent as message content (markers stay plain text)."""
        return len(self.tokenizer.encode(text, disallowed_special=()))


class Messages:
    """``create`` (one finished reply) and ``stream`` (the reply as it is written)."""

    def __init__(self, client: Client):
        self._client = client

    def create(self, **request: Any) -> Message:
        """Send one request and return the reply; see ``stream`` for the arguments."""
        for item in self.stream(**request):
            pass
        return item

    def stream(self, *, messages: list[dict], max_tokens: int, system: str | None = None, tools=None,
               stop_sequences=None, thinking: dict | None = None, seed: int | None = None,
               temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None, min_p: float = 0.0,
               cache: bool = True, previous_id: str | None = None, context_policy: str = "error",
               trace: Trace | None = None, constrain_tools: bool | str = True) -> Iterator[ContentDelta | Message]:
        """Yield ``ContentDelta`` pieces as the model writes, then the finished ``Message``.

        messages: ``{"role": "user" | "assistant", "content": str | [blocks]}``, oldest first.
        max_tokens: the most tokens to generate (thinking included), >= 1.
        system, tools: the system prompt and the tools (``llmkit.chat.tools.Tool`` or definitions); a
            ``Tool`` marked ``server`` (``web_search``) is run by the client inside this call.
        stop_sequences: strings that end the reply (left out of it).
        thinking: None / {"type": "enabled"}: the model may think first; {"type": "disabled"}: not.
        seed, temperature, top_p, top_k, min_p: sampling (temperature 0 is greedy).
        cache: reuse the prompt cache across requests. previous_id: continue a stored conversation.
        context_policy: "error" (default) or "drop_oldest" when the prompt does not fit.
        trace: an ``llmkit.chat.trace.Trace`` to record what happened.
        constrain_tools: with tools offered, only let the model write tool calls that parse and fit
            an offered tool's schema, the tool's name chosen whole (``llmkit.chat.constrained``);
            "per_token" chooses the name token by token too; "copy" also chooses each argument's value
            whole among the conversation's spans and numbers; False leaves it unconstrained.

        The request is checked now, so a mistake raises here, before anything is generated.
        """
        request = self._prepare(messages, max_tokens, system, tools, stop_sequences, thinking, seed,
                                SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p),
                                cache, previous_id, context_policy, trace)
        request.constraint = _tool_constraint(self._client.tokenizer, request.tools, constrain_tools,
                                              request.messages)
        return self._run(request)

    def render(self, *, messages: list[dict], system: str | None = None, tools=None,
               thinking: dict | None = None) -> Rendered:
        """The exact tokens ``create`` would send for this request (the prompt)."""
        _thinking_enabled(thinking)  # checked; it does not change the prompt
        return self._render(system, tools or [], messages)

    # --- preparing the request --------------------------------------------------------------
    def _prepare(self, messages, max_tokens, system, tools, stop_sequences, thinking, seed, sampling,
                 cache, previous_id, context_policy, trace) -> _Request:
        check_int("max_tokens", max_tokens, minimum=1)
        if not isinstance(messages, list):
            raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}")
        check_context_policy(context_policy)
        if trace is not None and not isinstance(trace, Trace):
            raise TypeError(f"trace must be an llmkit.chat.trace.Trace or None, got {type(trace).__name__}")
        check_bool("cache", cache)
        if seed is not None:
            check_int("seed", seed)
        stop_sequences = check_stop_sequences(() if stop_sequences is None else stop_sequences, self._client.tokenizer)
        thinking_on = _thinking_enabled(thinking)
        if tools is not None and not isinstance(tools, (list, tuple)):
            raise TypeError(f"tools must be a list of Tool objects or tool definitions, got {type(tools).__name__}")

        if previous_id is not None:
            if previous_id not in self._client.conversations:
                raise ValueError(f"previous_id {previous_id!r} is not a conversation this client stored; "
                                 f"pass the id of an earlier reply from this client")
            stored_system, stored_tools, history = self._client.conversations[previous_id]
            system = stored_system if system is None else system
            tools = stored_tools if tools is None else tools
            messages = history + messages
        if not messages:
            raise ValueError("messages is empty; send at least one user message")
        tools = list(tools or [])
        messages = copy.deepcopy(messages)

        try:
            self._render(system, tools, messages)  # checks every message
        except (TypeError, ValueError) as exc:
            if previous_id is None:
                raise
            stored = len(self._client.conversations[previous_id][2])
            raise type(exc)(f"{exc} (message indices count the {stored} stored messages of previous_id "
                            f"first: your messages start at messages[{stored}])") from None
        messages, dropped, rendered = fit_context(lambda kept: self._render(system, tools, kept), messages,
                                                  self._client.context_window, context_policy)
        history = len(self._render(system, tools, messages[:-1], add_generation_prompt=False))
        return _Request(system, tools, messages, dropped, rendered, history, max_tokens, sampling,
                        stop_sequences, seed, cache, messages[-1]["role"] == "assistant", thinking_on, trace)

    def _render(self, system, tools, messages, add_generation_prompt: bool = True) -> Rendered:
        return render(self._client.tokenizer, messages, tools=tools, system=system,
                      add_generation_prompt=add_generation_prompt)

    # --- running it ---------------------------------------------------------------------------
    def _run(self, request: _Request) -> Iterator[ContentDelta | Message]:
        client, trace = self._client, request.trace
        number = next(client._numbers)
        message_id, tool_use_id = f"msg_{number:04d}", f"toolu_{number:04d}"
        if trace is not None:
            trace.add("request", request=number, id=message_id)
            trace.add("context", **context_parts(request.rendered, request.history_tokens, len(request.dropped)))
        special = client.tokenizer.special_tokens
        banned = () if request.thinking else (special["<|thinking|>"], special["<|end_thinking|>"])
        servers = server_tools(request.tools)
        holdback = max((len(s) for s in request.stop_sequences), default=1) - 1
        prompt, content, rounds = list(request.rendered.ids), [], []
        sent: list[int] = []  # characters already streamed, per block
        stop_reason = None
        while stop_reason is None:  # one generation per round; a server tool call starts another
            round_started = trace.now() if trace is not None else 0.0
            spent = sum(r.generation.usage.output_tokens for r in rounds)
            seed = None if request.seed is None else request.seed + len(rounds)
            events = client.token_stream(
                client.model, prompt, max_new_tokens=request.max_tokens - spent, sampling=request.sampling,
                stop_tokens=client.stop_tokens.end_turn, tool_stop_tokens=client.stop_tokens.tool_use,
                stop_sequences=request.stop_sequences, tokenizer=client.tokenizer, seed=seed,
                prefix_cache=client.prefix_cache if request.cache else None, suppress_tokens=banned,
                constraint=request.constraint)
            tokens: list[int] = []
            for event in events:
                if event.type == "token":
                    # stream the text up to the token before this one: if this token completes a stop
                    # sequence, the text it adds is cut, and so it must not have been sent yet
                    if tokens:
                        blocks = parse_assistant(client.tokenizer, tokens, tool_use_id=tool_use_id)
                        yield from deltas(content + label_server_calls(blocks, servers), sent, holdback)
                    tokens.append(event.token)
                else:
                    generation = event.generation
            rounds.append(Round(generation, tokens, round_started))
            blocks = final_content(generation, tokens, client.tokenizer, tool_use_id)
            call = server_call(generation.stop_reason, blocks, servers)
            if trace is not None:
                record_round(trace, rounds[-1], blocks, client.tokenizer)
            if call is None:
                content += blocks
                stop_reason = generation.stop_reason
                break
            calls = sum(block["type"] == "server_tool_use" for block in content)
            use, result = run_server_call(call, servers, calls, f"srvtoolu_{number:04d}_{calls + 1}", trace,
                                          client.tokenizer)
            content += blocks[:-1] + [use, result]
            yield from deltas(content, sent, 0, final=True)
            prompt += tokens + server_result_ids(client.tokenizer, result)
            if spent + generation.usage.output_tokens >= request.max_tokens:
                stop_reason = "max_tokens"  # the result is in the reply, but no budget is left to read it
            elif len(prompt) >= client.context_window:
                stop_reason = "context_window"
        yield from deltas(content, sent, 0, final=True)

        usage = message_usage(rounds, content, client.tokenizer)
        message = Message(
            id=message_id, content=content, stop_reason=stop_reason,
            stop_sequence=generation.stop_sequence if stop_reason == "stop_sequence" else None,
            bill=Bill(usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens, client.prices,
                      usage.thinking_tokens, usage.server_tool_calls),
            dropped=request.dropped, usage=usage)
        client.conversations[message_id] = (request.system, request.tools, _with_reply(request, content))
        if trace is not None:
            trace.add("bill", bill=message.bill)
        yield message


# --- helpers ------------------------------------------------------------------------------------------

def _one_step_at_a_time(token_stream: Callable[..., Iterator], lock) -> Callable[..., Iterator]:
    """``token_stream`` made safe to share between threads: every step runs while holding ``lock``.
    The lock is never held while the caller has a token in hand, so streams in one thread can be
    read in turn, and a reader that stops early blocks no one."""
    def stream(*args, **kwargs) -> Iterator:
        with lock:
            events = token_stream(*args, **kwargs)
        try:
            while True:
                with lock:
                    event = next(events, None)
                if event is None:
                    return
                yield event
        finally:
            with lock:
                events.close()
    return stream


def _thinking_enabled(thinking) -> bool:
    if thinking is None:
        return True
    if not isinstance(thinking, dict) or set(thinking) != {"type"} or thinking["type"] not in ("enabled", "disabled"):
        raise ValueError(f"thinking must be None, {{'type': 'enabled'}} or {{'type': 'disabled'}}, got {thinking!r}")
    return thinking["type"] == "enabled"


def _tool_constraint(tokenizer, tools: list, constrain: bool | str, messages: list[dict]):
    """What makes a ``ToolCallConstraint`` per sample for ``generate``, or None (no tools, or off).
    One is built here, so a schema the constraint cannot enforce raises now, with the request.
    "copy" also chooses each string argument whole among the spans of ``messages``
    (``llmkit.chat.value_copy``)."""
    if not isinstance(constrain, bool) and constrain not in ("per_token", "copy"):
        raise TypeError(f"constrain_tools must be True, False, \"per_token\" or \"copy\", got {constrain!r}")
    if not constrain or not tools:
        return None
    whole = constrain != "per_token"
    copy_from = value_copy.sources(messages) if constrain == "copy" else None
    ToolCallConstraint(tokenizer, tools, choose_names=whole, copy_from=copy_from)
    return functools.partial(ToolCallConstraint, tokenizer, tools, choose_names=whole, copy_from=copy_from)


def _with_reply(request: _Request, content: list[dict]) -> list[dict]:
    """The conversation to store: what was sent plus the reply (merged into a continued prefill)."""
    messages = copy.deepcopy(request.messages)
    if not request.prefilled:
        return messages + [{"role": "assistant", "content": copy.deepcopy(content)}]
    last = messages[-1]
    blocks = [{"type": "text", "text": last["content"]}] if isinstance(last["content"], str) else last["content"]
    for block in copy.deepcopy(content):
        if blocks and block["type"] == "text" and blocks[-1]["type"] == "text":
            blocks[-1] = {"type": "text", "text": blocks[-1]["text"] + block["text"]}
        else:
            blocks.append(block)
    last["content"] = blocks
    return messages
