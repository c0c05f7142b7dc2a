"""The relay between a request's thread and the event loop: every item arrives once, in order,
however the thread's pace and the loop's line up, and a batch encodes to the same bytes as its
events one by one."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from sse_starlette.sse import ServerSentEvent

from llmkit.serve.relay import SEPARATOR, Done, Failed, Relay, encode


def drain(make) -> tuple[list, list[int]]:
    async def main():
        relay, items, sizes = Relay(make), [], []
        while not items or not isinstance(items[-1], (Done, Failed)):
            batch = await relay.take()
            sizes.append(len(batch))
            items += batch
        return items, sizes
    return run_in_fresh_loop(main)


def run_in_fresh_loop(main):
    """``asyncio.run(main())`` in a thread of its own: another test in the same session (the browser
    test's driver) may leave an event loop running in this thread, and asyncio.run refuses to nest."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(main())).result()


def test_every_item_arrives_once_in_order_and_a_burst_comes_as_few_batches():
    gate = threading.Event()

    def make():
        yield 0
        gate.wait(5)  # the rest come while the reader is not looking
        yield from range(1, 500)

    async def main():
        relay = Relay(make)
        first = await relay.take()
        gate.set()
        items = list(first)
        batches = 1
        while not isinstance(items[-1], Done):
            items += await relay.take()
            batches += 1
        return items, batches

    items, batches = run_in_fresh_loop(main)
    assert items[:-1] == list(range(500)) and isinstance(items[-1], Done)
    assert batches < 500  # at least some items came together


def test_an_error_in_the_thread_arrives_after_the_items_before_it():
    def make():
        yield "a"
        raise ValueError("broken")

    items, _ = drain(make)
    assert items[0] == "a" and isinstance(items[1], Failed) and str(items[1].error) == "broken"


def test_a_batch_encodes_to_its_events_laid_end_to_end():
    events = [{"event": "content_block_delta", "data": '{"text": "hi"}'}, {"data": "[DONE]"}]
    one_by_one = b"".join(ServerSentEvent(**e, sep=SEPARATOR).encode() for e in events)
    assert encode(events) == one_by_one
    assert one_by_one.count(b"\r\n\r\n") == 2
