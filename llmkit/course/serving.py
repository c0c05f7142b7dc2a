"""Load experiments against ``llmkit serve`` (notebook 12 and ``benchmarks/serve.py``).

The same requests are sent by 1, 2, 4, ... clients at once, each streaming its reply through an
official SDK client; what comes back is the aggregate output tokens per second, each request's
time to first token, and (read from ``/v1/stats`` while the load runs) the KV blocks each running
request held. Continuous batching shows up as tokens/s rising with the number of clients while
time to first token grows only slowly.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Load:
    """One load level: ``clients`` streaming at once."""

    clients: int
    output_tokens: int
    seconds: float
    first_token_s: list[float]
    blocks_per_request: list[int] = field(default_factory=list)  # samples of /v1/stats while it ran

    @classmethod
    def pooled(cls, loads: list[Load]) -> Load:
        """Several runs of one load level as one: their tokens, seconds and first tokens together."""
        return cls(loads[0].clients, sum(load.output_tokens for load in loads), sum(load.seconds for load in loads),
                   [t for load in loads for t in load.first_token_s],
                   [b for load in loads for b in load.blocks_per_request])

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds

    def first_token_percentile(self, q: float) -> float:
        ordered = sorted(self.first_token_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def median_first_token_s(self) -> float:
        return statistics.median(self.first_token_s)


def stream_one(client, model: str, question: str, max_tokens: int) -> tuple[int, float]:
    """Stream one greedy reply with an Anthropic SDK client: (output tokens, seconds to its first content)."""
    started, first = time.perf_counter(), None
    with client.messages.stream(model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": question}],
                                extra_body={"temperature": 0}) as stream:
        for event in stream:
            if first is None and event.type in ("content_block_start", "content_block_delta"):
                first = time.perf_counter() - started
        usage = stream.get_final_message().usage
    return usage.output_tokens, time.perf_counter() - started if first is None else first


def run_load(client, model: str, questions: list[str], clients: int, max_tokens: int,
             stats=None) -> Load:
    """Send every question, ``clients`` at a time; ``stats`` (a function returning ``/v1/stats``)
    is sampled meanwhile for the blocks each running request holds."""
    done, blocks = threading.Event(), []

    def watch() -> None:
        while not done.is_set():
            blocks.extend(stats()["kv_blocks"]["per_running_request"])
            done.wait(0.02)

    watcher = threading.Thread(target=watch) if stats is not None else None
    if watcher is not None:
        watcher.start()
    results, seconds = run_concurrently(questions, clients, lambda q: stream_one(client, model, q, max_tokens))
    done.set()
    if watcher is not None:
        watcher.join()
    return Load(clients, sum(n for n, _ in results), seconds, [t for _, t in results], blocks)


def run_concurrently(items: list, clients: int, work: Callable) -> tuple[list, float]:
    """``work(item)`` for every item, ``clients`` threads at a time, each taking the next item as it
    finishes one (as real clients do): (the results, in the order they finished; the wall seconds)."""
    pending, results, lock = list(items), [], threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                item = pending.pop()
            outcome = work(item)
            with lock:
                results.append(outcome)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, time.perf_counter() - started
