"""Running a tool under a time limit: in a thread (cheap, cannot be stopped) or in a process (can be).

Python has no way to stop a thread from outside. A tool in a worker thread that runs too long can
only be *abandoned*: the harness stops waiting and answers with an error, while the thread runs on
in the background. Worse, a tool that holds the GIL inside one long C call (``(3**25_000_000)
.bit_length()``, a regular expression that backtracks catastrophically) stops the waiting thread
from even noticing the deadline: it wakes only when the call lets go. So a thread gives a *limit on
what counts as a result*: anything that comes back after the deadline is an error, never a success.

A worker process is a real deadline: the operating system kills it when time is up, whatever it is
doing. It costs a fork per call (a few milliseconds), its changes to memory stay in the child, and
only its JSON text comes back (the parent never unpickles anything the tool produced). Use it for
tools that are slow, untrusted, or might hold the GIL (``@tool(isolated=True)``).
"""
from __future__ import annotations

import json
import multiprocessing
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

MAX_RESULT_BYTES = 64 * 2**20  # the most JSON a worker process may send back


@dataclass(frozen=True)
class Outcome:
    """How one call went. ``status``: "ok" (``value`` is the text of what it returned), "raised"
    (``error`` says what), "unsendable" (it returned something ``serialise`` refused; ``error`` says
    why), "timeout" (not finished at the deadline: stopped or abandoned) or "late" (finished, but
    after the deadline, so its result is dropped). ``seconds``: how long the harness waited."""

    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0


def call_in_thread(function: Callable, arguments: dict, timeout_s: float,
                   serialise: Callable[[Any], str]) -> Outcome:
    """Call ``function(**arguments)`` in a daemon thread and wait at most ``timeout_s`` seconds;
    what it returns is turned into text with ``serialise``.

    A tool still running at the deadline is abandoned (status "timeout"); one that returns after it
    (the wait itself was held up by the GIL) is "late": its result is not used either way.
    """
    outcome: list[tuple[Any, BaseException | None]] = []

    def work() -> None:
        try:
            outcome.append((function(**arguments), None))
        except BaseException as exc:  # even SystemExit: report it instead of ending the thread silently
            outcome.append((None, exc))

    started = time.perf_counter()
    worker = threading.Thread(target=work, name=f"tool-{getattr(function, 'name', 'call')}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    seconds = time.perf_counter() - started
    if worker.is_alive():
        return Outcome("timeout", seconds=seconds)
    if seconds > timeout_s:
        return Outcome("late", seconds=seconds)
    value, error = outcome[0]
    if error is not None:
        return Outcome("raised", error=f"{type(error).__name__}: {error}", seconds=seconds)
    try:
        return Outcome("ok", value=serialise(value), seconds=seconds)
    except (TypeError, ValueError) as exc:
        return Outcome("unsendable", error=str(exc), seconds=seconds)


def call_in_process(function: Callable, arguments: dict, timeout_s: float,
                    serialise: Callable[[Any], str]) -> Outcome:
    """Call ``function(**arguments)`` in a child process, killed if it is not done by the deadline.

    The child turns the return value into text with ``serialise`` and sends that back as JSON, so
    ``value`` is always a ``str``. Processes are forked where the platform allows (the tool and its
    arguments are inherited, not pickled, so a tool defined in a notebook works); elsewhere they are
    spawned, and the tool must then be importable by name.
    """
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    receiver, sender = context.Pipe(duplex=False)
    worker = context.Process(target=_child, args=(function, arguments, serialise, sender), daemon=True,
                             name=f"tool-{getattr(function, 'name', 'call')}")
    started = time.perf_counter()
    worker.start()
    sender.close()  # the child holds the only writing end, so its exit shows up here as end of file
    try:
        if not receiver.poll(timeout_s):
            return Outcome("timeout", seconds=time.perf_counter() - started)
        try:
            message = json.loads(receiver.recv_bytes(MAX_RESULT_BYTES))
        except EOFError:
            worker.join(1.0)
            return Outcome("raised", error=f"the worker process exited (code {worker.exitcode}) without a result",
                           seconds=time.perf_counter() - started)
        except OSError:
            return Outcome("raised", error=f"the result is over {MAX_RESULT_BYTES} bytes of JSON; return less",
                           seconds=time.perf_counter() - started)
    finally:
        receiver.close()
        if worker.is_alive():
            worker.kill()
        worker.join()
    seconds = time.perf_counter() - started
    if "value" in message:
        return Outcome("ok", value=message["value"], seconds=seconds)
    return Outcome(message["status"], error=message["error"], seconds=seconds)


def _child(function: Callable, arguments: dict, serialise: Callable[[Any], str], sender) -> None:
    """Runs in the worker process: call the tool, send back its text or what went wrong, as JSON."""
    try:
        value = function(**arguments)
    except BaseException as exc:
        message = {"status": "raised", "error": f"{type(exc).__name__}: {exc}"}
    else:
        try:
            message = {"value": serialise(value)}
        except (TypeError, ValueError) as exc:
            message = {"status": "unsendable", "error": str(exc)}
    sender.send_bytes(json.dumps(message, ensure_ascii=False).encode())
    sender.close()
