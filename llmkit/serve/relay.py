"""Handing a request thread's server-sent events to the event loop, a batch at a time.

Each request's chat client and API shaping run as plain blocking code in a thread of its own;
the event loop writes their events to the socket. Waking the loop once per event (one
``call_soon_threadsafe``, one socket write each) costs more than making the event, and with eight
streams it is eight wake-ups per decode step. So the thread appends to a list and wakes the loop
only when the list was empty; the loop takes every event waiting and writes them as one chunk.
A client reads the same bytes either way: SSE events are just text laid end to end.
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

from sse_starlette.sse import ServerSentEvent

SEPARATOR = "\r\n"  # the line ending of every event (EventSourceResponse's own pings use it too)


class Done:
    """The iterator ran out."""


@dataclass
class Failed:
    """The iterator raised ``error``."""

    error: BaseException


class Relay:
    """A blocking iterator run in a thread of its own; ``take`` awaits what it has made so far."""

    def __init__(self, make: Callable[[], Iterator]):
        self.loop = asyncio.get_running_loop()
        self.ready = asyncio.Event()
        self.items: deque = deque()
        self.lock = threading.Lock()
        self.woken = False  # a wake-up is on its way to the loop; no need to send another
        threading.Thread(target=self._run, args=(make,), name="llmkit-request", daemon=True).start()

    def _run(self, make) -> None:
        try:
            for item in make():
                self._put(item)
            self._put(Done())
        except BaseException as error:  # handed to the reader, who turns it into an API error
            self._put(Failed(error))

    def _put(self, item) -> None:
        with self.lock:
            self.items.append(item)
            if self.woken:
                return
            self.woken = True
        try:
            self.loop.call_soon_threadsafe(self.ready.set)
        except RuntimeError:  # the event loop has closed: no one is reading any more
            pass

    async def take(self) -> list:
        """Every item made since the last ``take`` (at least one), in order."""
        await self.ready.wait()
        with self.lock:
            self.ready.clear()
            self.woken = False
            items = list(self.items)
            self.items.clear()
        return items


def encode(events: list[dict]) -> bytes:
    """Server-sent events (dicts of ``event``/``data``) as the bytes of one chunk."""
    return b"".join(ServerSentEvent(**event, sep=SEPARATOR).encode() for event in events)
