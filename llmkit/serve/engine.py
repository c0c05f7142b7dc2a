"""Continuous batching: one thread owns the model and decodes every running request together.

A decode step of a small model costs about the same for one sequence as for eight (the weights are
read once either way), so a server that runs requests one after another wastes most of each step.
The engine keeps a *running batch*. Each loop it

1. admits waiting requests while the batch has room and the KV pool (``llmkit.serve.paged``) can
   promise them every block they may need (cached prompt blocks are reused);
2. runs one forward pass for the whole batch, in which every request reads the tokens it has not
   read yet: a request admitted since the last step its prompt, the others their newest token.
   So a new request's prefill rides along with everyone's decode step, and each request gets
   one new token;
3. lets every request that stopped leave at once, its blocks back in the pool, so a long reply
   never holds up a short one (Orca, Yu et al. 2022; vLLM, Kwon et al. 2023).

The forward pass is ``llmkit.model.fast``'s tensor functions with every linear layer packed for
the CPU's matrix kernel when the engine starts (``llmkit.serve.packed``), which makes a pass over
several rows much cheaper than ``F.linear``'s.

Requests talk to the engine through queues: ``stream`` puts a ``Sequence`` in the inbox and reads
its tokens from the sequence's outbox, with the same events as ``llmkit.generation.generate.stream``,
so the chat client runs unchanged on top (``Client.token_stream``).

Bounds: at most ``max_waiting`` requests wait (``Overloaded`` beyond that), a request that could
never fit the pool is refused (``RequestTooLarge``), and one that runs past ``request_timeout_s``
or is cancelled gives its blocks back at the next step.
"""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Collection, Iterable, Iterator, Sequence as Seq

import torch

from llmkit.generation.choice import choose_option, score_after
from llmkit.generation.request import Request, check_request
from llmkit.generation.results import StopEvent, TokenEvent
from llmkit.generation.sampling import SamplingParams, sample_batch
from llmkit.model.fast import FastModel, why_not_fast
from llmkit.model.transformer import Transformer
from llmkit.serve.packed import packed_linear
from llmkit.serve.paged import BlockPool, Reads, paged_forward
from llmkit.serve.sequence import Cancelled, RequestContext, RequestTimeout, Sequence

IDLE_WAIT_S = 0.05  # how long an idle engine sleeps on its inbox before looking for cancellations
PARALLEL_TOKENS = 64  # a pass that reads this many tokens (a long prompt) is worth splitting over cores


class Overloaded(RuntimeError):
    """Too many requests are waiting already (or the server is shutting down); try again later."""


class RequestTooLarge(ValueError):
    """The request needs more KV blocks than the whole pool holds."""


class NotServable(ValueError):
    """The model cannot run on the engine's tensor-function path (``llmkit.model.fast``)."""


class Engine:
    """The model behind a server: ``stream`` a request, read ``stats()``, ``close()`` at the end."""

    def __init__(self, model: Transformer, *, max_batch: int = 8, kv_cache_mb: float = 64.0,
                 block_size: int = 16, max_waiting: int = 64, request_timeout_s: float = 300.0,
                 decode_threads: int | None = 1):
        limits = {"max_batch": max_batch, "max_waiting": max_waiting}
        if decode_threads is not None:
            limits["decode_threads"] = decode_threads
        for name, value in limits.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        self.model = model.eval()
        self.fast = self._fast(model)
        self.decode_threads = decode_threads
        weight = model.embed.weight
        self.pool = BlockPool.of_size(model.config, kv_cache_mb, block_size=block_size, device=weight.device,
                                      dtype=weight.dtype)
        self.max_batch, self.max_waiting, self.request_timeout_s = max_batch, max_waiting, request_timeout_s
        self.inbox: queue.Queue[Sequence] = queue.Queue()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._lock = threading.Lock()
        self._queued = 0  # submitted and not yet running (inbox + waiting)
        self._closing = False
        self._counts = dict(requests=0, finished=0, cancelled=0, timed_out=0, failed=0, output_tokens=0,
                            prompt_tokens=0, cache_read_tokens=0, cache_hits=0)
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens made) of recent steps
        self._thread = threading.Thread(target=self._loop, name="llmkit-engine", daemon=True)
        self._thread.start()

    @staticmethod
    def _fast(model: Transformer):
        """The engine computes with ``llmkit.model.fast``'s tensor functions, which skip what only
        modules have; a model that needs its modules (hooks, swapped layers) cannot be served, so it
        is refused here rather than silently losing its hooks."""
        reason = why_not_fast(model)
        if reason is not None:
            raise NotServable(f"the engine cannot serve this model: {reason}; remove the hooks "
                              f"or swapped layers (or use llmkit.generation.generate, which runs modules)")
        return FastModel(model, packed_linear)  # weights packed once for the CPU kernel (llmkit.serve.packed)

    # --- the requests' side ----------------------------------------------------------------------
    def stream(self, model: Transformer, prompt_ids: Seq[int], *, max_new_tokens: int,
               sampling: SamplingParams | None = None, stop_tokens: Iterable[int] = (),
               tool_stop_tokens: Iterable[int] = (), stop_sequences: Iterable[str] = (), tokenizer=None,
               seed: int | None = None, prefix_cache=None, suppress_tokens: Collection[int] = (),
               constraint=None, context: RequestContext | None = None) -> Iterator[TokenEvent | StopEvent]:
        """``llmkit.generation.generate.stream`` through the batch. The engine's own prompt cache (its
        named blocks) serves every request, so ``prefix_cache`` is not used."""
        if model is not self.model:
            raise ValueError("this engine serves another model")
        request = check_request(model, prompt_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                                stop_tokens=stop_tokens, tool_stop_tokens=tool_stop_tokens,
                                stop_sequences=stop_sequences, tokenizer=tokenizer, seed=seed, use_cache=True,
                                prefix_cache=None, num_samples=1, keep_logits=False,
                                suppress_tokens=suppress_tokens, constraint=constraint)
        sequence = self._make(request, context or RequestContext())
        self._submit(sequence)
        return self._events(sequence)

    def _make(self, request: Request, context: RequestContext) -> Sequence:
        config = self.model.config
        suppressed = None
        if request.suppressed:
            suppressed = torch.zeros(config.vocab_size, dtype=torch.bool)
            suppressed[sorted(request.suppressed)] = True
        sequence = Sequence(request.prompt, max_new_tokens=request.max_new_tokens,
                            context_length=config.context_length, params=request.params, seed=request.seed,
                            end_turn=request.end_turn, tool_use=request.tool_use, tokenizer=request.tokenizer,
                            stop_sequences=request.stops, suppressed=suppressed,
                            constraint=request.constraints[0] if request.constraints else None, context=context,
                            deadline=time.monotonic() + self.request_timeout_s, device=self.model.device)
        needed = self.pool.blocks_for(sequence.most_positions)
        if needed > self.pool.num_blocks:
            raise RequestTooLarge(f"this request may need {needed} KV blocks but the pool holds "
                                  f"{self.pool.num_blocks}; start the server with a larger --kv-cache-mb "
                                  f"or ask for fewer max_tokens")
        return sequence

    def _submit(self, sequence: Sequence) -> None:
        with self._lock:
            if self._closing:
                raise Overloaded("the server is shutting down")
            if self._queued >= self.max_waiting:
                raise Overloaded(f"{self._queued} requests are already waiting (the limit is "
                                 f"{self.max_waiting}); try again shortly")
            self._queued += 1
        self.inbox.put(sequence)

    def _events(self, sequence: Sequence) -> Iterator[TokenEvent | StopEvent]:
        """The sequence's events as the engine makes them; leaving early cancels it."""
        try:
            while True:
                try:
                    item = sequence.outbox.get(timeout=1.0)
                except queue.Empty:
                    if not self._thread.is_alive():
                        raise RuntimeError("the engine thread stopped") from None
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, StopEvent):
                    return
        finally:
            if sequence.stop_reason is None:  # the reader left before the end: free its slot and blocks
                sequence.context.cancel()

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, finish the ones admitted or waiting, then stop the thread."""
        with self._lock:
            self._closing = True
        self._thread.join(timeout)

    # --- the engine thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                idle = not self.running and not self.waiting
                if idle and self._closing and self.inbox.empty():
                    return
                self._take_inbox(wait=idle)
                self._drop_cancelled()
                self._admit()
                if self.running:
                    self._guarded(self.running, self._step)

    def _take_inbox(self, wait: bool) -> None:
        try:
            self.waiting.append(self.inbox.get(timeout=IDLE_WAIT_S) if wait else self.inbox.get_nowait())
            while True:
                self.waiting.append(self.inbox.get_nowait())
        except queue.Empty:
            pass

    def _drop_cancelled(self) -> None:
        now = time.monotonic()
        for group in (self.running, self.waiting):
            for sequence in [s for s in group if s.cancelled or now > s.deadline]:
                group.remove(sequence)
                if group is self.waiting:
                    self._dequeued()
                timed_out = not sequence.cancelled
                self._counts["timed_out" if timed_out else "cancelled"] += 1
                self._finish(sequence, RequestTimeout(f"the request ran past the server's limit of "
                                                      f"{self.request_timeout_s:g} s per request")
                             if timed_out else Cancelled("the request was cancelled"))

    def _dequeued(self) -> None:
        with self._lock:
            self._queued -= 1

    def _admit(self) -> None:
        """Move waiting requests into the batch, oldest first, while there is room and memory."""
        pool = self.pool
        while self.waiting and len(self.running) < self.max_batch:
            sequence = self.waiting[0]
            cached = pool.find_prefix(sequence.prompt)
            needed = pool.blocks_for(sequence.most_positions) - len(cached)
            promised = sum(pool.blocks_for(s.most_positions) - len(s.table) for s in self.running)
            if pool.available - promised < needed:  # it waits until running requests give blocks back
                pool.release(cached)
                return
            self.waiting.popleft()
            self._dequeued()
            sequence.table, sequence.length = cached, len(cached) * pool.block_size
            sequence.cache_read = sequence.length
            self.running.append(sequence)
            self._counts["requests"] += 1
            self._counts["prompt_tokens"] += len(sequence.prompt)
            self._counts["cache_read_tokens"] += sequence.cache_read
            self._counts["cache_hits"] += sequence.cache_read > 0

    def _step(self, batch: list[Sequence]) -> None:
        """One forward pass in which each sequence reads what it has not read yet (``Sequence.unread``),
        then one new token for each. A prompt read here is named, so later prompts find its blocks."""
        pool = self.pool
        rows = []
        for sequence in batch:
            new = sequence.unread()
            while len(sequence.table) < pool.blocks_for(sequence.length + len(new)):
                sequence.table.append(pool.allocate())  # promised at admission, so never short
            rows.append((new, sequence.length, sequence.table))
        reads = Reads.of(rows, pool.block_size, self.model.device)
        # the choosing too: its small ops (argmax, masks) would otherwise wake a second thread each
        with intra_op_threads(self.decode_threads if len(reads.ids) < PARALLEL_TOKENS else None):
            logits = paged_forward(self.fast, pool, reads)
            for sequence, (new, _, _) in zip(batch, rows):
                sequence.length += len(new)
                if sequence.length == len(sequence.prompt):  # it has just read its prompt
                    sequence.context.cache_write_tokens += pool.name(sequence.table, sequence.prompt) * pool.block_size
            self._choose(list(batch), logits)

    def _choose(self, batch: list[Sequence], logits: torch.Tensor) -> None:
        for sequence in batch:
            if sequence.constraint is not None:
                self._choose_option(sequence)
        for sequence, token in zip(batch, pick_tokens(batch, logits)):
            if isinstance(token, Exception):  # a constraint that failed: only this request ends
                self._counts["failed"] += 1
                self.running.remove(sequence)
                self._finish(sequence, token)
                continue
            sequence.add(token)
            if sequence.stop_reason is not None:
                self.running.remove(sequence)
                self._counts["finished"] += 1
                self._finish(sequence, None)
        self._counts["output_tokens"] += len(batch)
        self._recent.append((time.monotonic(), len(batch)))

    def _choose_option(self, sequence: Sequence) -> None:
        """Where the sequence's constraint offers whole options (a tool's name), pick one by the
        model's probability of all its tokens (``llmkit.generation.choice``). The paged cache is
        not copied: the context is read again, once per call, into a plain cache."""
        offer = getattr(sequence.constraint, "choices", None)
        options = offer() if offer is not None else None
        if not options or max(len(option) for option in options) > sequence.steps - len(sequence.tokens):
            return
        scores = score_after(self.model, sequence.prompt + sequence.tokens, options)
        choose_option(sequence.constraint, options, scores, sequence.params, sequence.generator, sequence.suppressed)

    def _guarded(self, batch: list[Sequence], step) -> None:
        """Run a forward pass; if it fails, the requests in it end with the error, not the server."""
        try:
            step(batch)
        except Exception as error:
            for sequence in list(batch):
                if sequence in self.running:
                    self.running.remove(sequence)
                    self._counts["failed"] += 1
                    self._finish(sequence, error)

    def _finish(self, sequence: Sequence, error: BaseException | None) -> None:
        """Give the sequence's blocks back (naming its full blocks for the prompt cache first)."""
        if error is None and sequence.table:
            self.pool.name(sequence.table, (sequence.prompt + sequence.tokens)[:sequence.length])
        self.pool.release(sequence.table)
        sequence.table = []
        if error is not None:
            sequence.fail(error)

    # --- what /v1/stats shows -----------------------------------------------------------------------
    def stats(self) -> dict:
        """Running and waiting requests, KV blocks, recent tokens per second, prompt-cache reuse."""
        now, recent = time.monotonic(), list(self._recent)
        while self._recent and self._recent[0][0] < now - 10:
            self._recent.popleft()
        window = [n for t, n in recent if t >= now - 5]
        pool, counts = self.pool, dict(self._counts)
        return {
            "running": len(self.running), "waiting": self._queued, "max_batch": self.max_batch,
            "max_waiting": self.max_waiting,
            "kv_blocks": {"total": pool.num_blocks, "used": pool.used, "cached_idle": len(pool.idle),
                          "free": len(pool.free), "block_size": pool.block_size,
                          "pool_mib": round(pool.nbytes / 2**20, 3),
                          "per_running_request": [len(s.table) for s in list(self.running)]},
            "tokens_per_second_5s": round(sum(window) / 5, 2),
            "prompt_cache": {"hits": counts["cache_hits"], "read_tokens": counts["cache_read_tokens"],
                             "prompt_tokens": counts["prompt_tokens"], "evictions": pool.evictions},
            "requests": {k: counts[k] for k in ("requests", "finished", "cancelled", "timed_out", "failed")},
            "output_tokens": counts["output_tokens"],
        }


def pick_tokens(batch: list[Sequence], logits: torch.Tensor) -> list[int | Exception]:
    """Each row's next token, or the error that stopped that row alone.

    Plain greedy rows (no constraint, no banned tokens: most requests) take one ``argmax`` over
    all of them and one copy to Python, instead of a check, an ``argmax`` and a copy per row; row
    by row that small work cost about as much as the matmuls of a batch of eight. Rows that sample,
    or are constrained, draw on their own (each has its own random generator and mask)."""
    picks: list[int | Exception | None] = [None] * len(batch)
    plain = [row for row, sequence in enumerate(batch) if sequence.plain_greedy]
    if plain:
        try:
            chosen = sample_batch(logits[plain], batch[plain[0]].params).tolist()
        except ValueError:  # a row with nothing to draw from: find it row by row below
            plain = []
        else:
            for row, token in zip(plain, chosen):
                picks[row] = token
    for row, sequence in enumerate(batch):
        if picks[row] is None:
            try:
                picks[row] = sequence.choose(logits[row:row + 1])
            except Exception as error:
                picks[row] = error
    return picks


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """Run a decode step on ``threads`` of torch's intra-op threads (None: leave torch's setting).

    A decode step multiplies a few rows by small matrices: split over two cores, each matmul
    waits at a fork-join barrier for a core that a stream thread may be using, which on a small
    machine cost more than the split saved (measured: benchmarks/serve.py). One thread leaves the
    other cores to the request threads; a pass that reads a long prompt (``PARALLEL_TOKENS``)
    splits well, and keeps torch's setting."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
