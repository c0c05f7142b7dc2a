"""Events and the bill: what happened inside one request, or one agent run, and what it cost.

A chat reply looks like one step, but the harness does several: it assembles the context (system
prompt, tool definitions, the history re-sent in full, the new message), the model prefills it
(part of it may be served from the prompt cache), thinks, answers or asks for a tool, the harness
runs the tool and sends its result back, and so on. A ``Trace`` records each of those as an
event with a timestamp, so a notebook can print it (``summary``), read it as one row per request
(``request_rows``) or draw it (``llmkit.viz.trace``). Pass one to ``Client.messages.create(..., trace=t)`` or ``run_agent``.

The bill follows the usual price table: input tokens the model read, input tokens served from
the prompt cache (much cheaper: nothing was computed), and output tokens (dearer: one forward
pass each, thinking included, shown to the user or not), plus a fee per server tool call (a web
search costs its tokens *and* the fee).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from llmkit.checks import check_number
from llmkit.generation.generate import Usage

PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Prices:
    """The price table. Tokens are priced in dollars per million: the defaults are a typical hosted
    model's list price ($2 in, $10 out) with cache reads at a tenth of the input price. A server
    tool call (a web search) is a fee per call on top of its tokens: $10 per 1,000 searches."""

    input: float = 2.0
    output: float = 10.0
    cache_read: float = 0.2
    server_tool_call: float = 0.01  # dollars per call, not per million

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "server_tool_call"):
            check_number(f"Prices.{name}", getattr(self, name), minimum=0)


@dataclass(frozen=True)
class BillLine:
    """One line of a bill: ``count`` units (tokens, or calls) at ``price`` dollars per ``per`` units."""

    label: str
    count: int
    price: float
    per: int = PER_MILLION
    unit: str = "tok"

    @property
    def dollars(self) -> float:
        return self.count * self.price / self.per

    def __str__(self) -> str:
        per = "/M" if self.per == PER_MILLION else f" per {self.unit}" if self.per == 1 else f"/{self.per}"
        return f"{self.label:<16} {self.count:>8} {self.unit:<4} x ${self.price:g}{per} = ${self.dollars:.6f}"


@dataclass(frozen=True)
class Bill:
    """What a request (or several, added with ``+``) cost.

    Input tokens the model computed, input tokens read from the prompt cache, output tokens (of
    which ``thinking_tokens`` were thinking: same price, shown to the user or not) and the fee for
    each server tool call (``server_tool_calls``, e.g. web searches)."""

    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    prices: Prices = field(default_factory=Prices)
    thinking_tokens: int = 0  # part of output_tokens
    server_tool_calls: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.thinking_tokens <= self.output_tokens:
            raise ValueError(f"thinking_tokens ({self.thinking_tokens}) is part of output_tokens "
                             f"({self.output_tokens}): it must be between 0 and output_tokens")

    @property
    def lines(self) -> list[BillLine]:
        """Cache read, new input, output as thinking and text, and the server tool calls' fee."""
        text = self.output_tokens - self.thinking_tokens
        return [BillLine("cache read", self.cache_read_input_tokens, self.prices.cache_read),
                BillLine("input", self.input_tokens, self.prices.input),
                BillLine("output: thinking", self.thinking_tokens, self.prices.output),
                BillLine("output: text", text, self.prices.output),
                BillLine("server tool calls", self.server_tool_calls, self.prices.server_tool_call, per=1,
                         unit="call")]

    @property
    def total(self) -> float:
        return sum(line.dollars for line in self.lines)

    def __add__(self, other: Bill) -> Bill:
        if not isinstance(other, Bill):
            return NotImplemented
        if other.prices != self.prices:
            raise ValueError("these bills use different price tables; add bills priced the same way")
        return Bill(self.input_tokens + other.input_tokens,
                    self.cache_read_input_tokens + other.cache_read_input_tokens,
                    self.output_tokens + other.output_tokens, self.prices,
                    self.thinking_tokens + other.thinking_tokens, self.server_tool_calls + other.server_tool_calls)

    def __str__(self) -> str:
        rows = [f"  {line}" for line in self.lines]
        return "\n".join(rows + [f"  {'total':<16} {'':>48}${self.total:.6f}"])


@dataclass(frozen=True)
class Event:
    """One thing that happened: ``kind`` (see ``Trace``), ``t`` seconds since the trace started,
    ``duration`` seconds it took (0 for an instant), and its details in ``data``."""

    kind: str
    t: float
    duration: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


class Trace:
    """A recorder the client and ``run_agent`` fill as they work.

    Event kinds, in the order a request makes them:
        request      a request starts (``request``: its number in this trace)
        context      tokens per part of the prompt: system, tools, history, new_message (+ dropped)
        prefill      prompt tokens read and served from the cache; ``duration`` = time to first token
        thinking     how many tokens the model spent thinking
        answer       the reply: stop reason, text, content blocks, output tokens and the raw token
                     ids the model wrote (markers included); ``duration`` = the decode time
        bill         the request's ``Bill``
        tool_call    a tool run by the agent loop: name, input, ``duration`` = its run time, is_error
        tool_result  the result sent back: its tokens and whether it is an error
        final        the agent's final answer
    """

    def __init__(self):
        self.events: list[Event] = []
        self._start = time.perf_counter()

    def now(self) -> float:
        """Seconds since the trace started."""
        return time.perf_counter() - self._start

    def add(self, kind: str, *, t: float | None = None, duration: float = 0.0, **data: Any) -> Event:
        """Record an event (``t`` defaults to now) and return it."""
        event = Event(kind, self.now() if t is None else t, duration, data)
        self.events.append(event)
        return event

    def of_kind(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.kind == kind]

    def bill(self) -> Bill:
        """The sum of every request's bill (an empty ``Bill`` if none was recorded)."""
        bills = [event.data["bill"] for event in self.of_kind("bill")]
        total = bills[0] if bills else Bill()
        for bill in bills[1:]:
            total = total + bill
        return total

    def summary(self) -> str:
        """The events as readable lines in time order, then the total bill."""
        ordered = sorted(self.events, key=lambda event: event.t)  # stable: same-time events keep their order
        lines = [f"{event.t * 1000:9.1f} ms  {event.kind:<11} {_describe(event)}" for event in ordered]
        return "\n".join(lines + ["bill:", str(self.bill())])

    def __repr__(self) -> str:
        return f"Trace({len(self.events)} events)"


def _describe(event: Event) -> str:
    d = event.data
    if event.kind == "context":
        parts = ", ".join(f"{name} {d[name]}" for name in ("system", "tools", "history", "new_message"))
        dropped = f"; dropped {d['dropped_messages']} old message(s)" if d.get("dropped_messages") else ""
        return f"{d['total']} tokens = {parts}{dropped}"
    if event.kind == "prefill":
        return (f"{d['input_tokens']} tokens prefilled, {d['cache_read_input_tokens']} from the cache; "
                f"first token after {event.duration * 1000:.1f} ms")
    if event.kind == "thinking":
        return f"{d['tokens']} thinking tokens"
    if event.kind == "answer":
        return f"{d['stop_reason']}, {d['output_tokens']} output tokens: {_short(d['text'])}"
    if event.kind == "bill":
        return f"${d['bill'].total:.6f}"
    if event.kind == "tool_call":
        error = " (error)" if d.get("is_error") else ""
        return f"{d['name']}({_short(str(d['input']))}) ran {event.duration * 1000:.1f} ms{error}"
    if event.kind == "tool_result":
        tokens = "?" if d.get("tokens") is None else d["tokens"]
        return f"{tokens} tokens{' (error)' if d.get('is_error') else ''}: {_short(d['content'])}"
    if event.kind == "final":
        return _short(d["text"])
    return ", ".join(f"{key}={value}" for key, value in d.items())


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# --- one row per request ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestRow:
    """One request of a trace: its prompt by part, its usage, why it stopped, its decode time and bill.

    ``history`` counts the earlier messages re-sent with it; ``new_message`` the newest message (a
    user message or a tool result) plus the ``<|assistant|>`` header that asks for the reply.
    ``usage`` is the request's ``Usage``, as ``Message.usage`` reports it. Times are in seconds.
    (With a server tool the model reads its context again after the result, so the input counts
    every round's prompt.)"""

    number: int  # 1, 2, ... in the order of the trace
    id: str
    system: int
    tools: int
    history: int
    new_message: int
    dropped_messages: int
    usage: Usage
    stop_reason: str
    decode_time: float
    bill: Bill
    text: str
    rounds: int = 1  # generations: more than one when the client ran a server tool inside the request

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens

    @property
    def billed_tokens(self) -> int:
        """Every token on the bill: the whole prompt (cached or not) plus the output."""
        return self.prompt_tokens + self.usage.output_tokens

    @property
    def cost(self) -> float:
        return self.bill.total


REQUEST_EVENTS = ("context", "prefill", "thinking", "answer", "bill")


def request_rows(trace: Trace) -> list[RequestRow]:
    """One row per request recorded by ``Client.messages.create(..., trace=trace)``, in order.

    A request's events run from its "request" event to the next one; the agent loop's tool events
    in between belong to no request and are skipped. A request in which the client ran a server
    tool has several generations (a prefill, decode and maybe thinking each): its row adds them
    up, as its bill does, and keeps the first time to first token and the last stop reason."""
    groups: list[dict[str, list[Event]]] = []
    for event in trace.events:
        if event.kind == "request":
            groups.append({"request": [event]})
        elif groups and event.kind in REQUEST_EVENTS:
            groups[-1].setdefault(event.kind, []).append(event)
    return [_request_row(number, group) for number, group in enumerate(groups, start=1)]


def _request_row(number: int, group: dict[str, list[Event]]) -> RequestRow:
    missing = [kind for kind in ("context", "prefill", "answer", "bill") if kind not in group]
    if missing:
        raise ValueError(f"request {group['request'][0].data.get('id', number)} has no {', '.join(missing)} event: "
                         f"record traces with Client.messages.create(..., trace=trace) or run_agent(..., trace=trace)")
    context, prefills, answers = group["context"][0].data, group["prefill"], group["answer"]
    return RequestRow(
        number, group["request"][0].data.get("id", ""), context["system"], context["tools"], context["history"],
        context["new_message"], context.get("dropped_messages", 0),
        usage=Usage(input_tokens=sum(p.data["input_tokens"] for p in prefills),
                    cache_read_input_tokens=sum(p.data["cache_read_input_tokens"] for p in prefills),
                    output_tokens=sum(a.data["output_tokens"] for a in answers),
                    thinking_tokens=sum(t.data["tokens"] for t in group.get("thinking", [])),
                    time_to_first_token=prefills[0].duration, server_tool_calls=len(answers) - 1),
        stop_reason=answers[-1].data["stop_reason"],
        decode_time=sum(a.duration for a in answers), bill=group["bill"][-1].data["bill"],
        text="".join(a.data.get("text", "") for a in answers), rounds=len(answers))
