"""Tool time limits are limits: a late result is never a success, and an isolated tool is stopped."""
import os
import time

import pytest

from llmkit.chat.deadline import call_in_process, call_in_thread
from llmkit.chat.tools import Tool, run_tool_call, tool
from llmkit.course.tools import EXAMPLE_TOOLS


def make_power(isolated: bool) -> Tool:
    @tool(isolated=isolated)
    def power(exponent: int) -> int:
        """How many bits 3 ** exponent has: one long C call that holds the GIL throughout.

        Args:
            exponent: The power of three.
        """
        return (3 ** exponent).bit_length()
    return power


@pytest.mark.parametrize("isolated", [False, True])
def test_a_well_behaved_tool_returns_its_result(isolated):
    power = make_power(isolated)
    result = run_tool_call([power], "power", {"exponent": 100}, tool_use_id="t", timeout_s=5)
    assert result == {"type": "tool_result", "tool_use_id": "t", "content": str((3 ** 100).bit_length()),
                      "is_error": False}


def test_a_thread_tool_that_holds_the_gil_past_the_limit_is_an_error_not_a_success():
    exponent = 1
    while True:  # find a call that holds the GIL clearly longer than the limit, whatever the machine
        started = time.perf_counter()
        (3 ** exponent).bit_length()
        if time.perf_counter() - started > 0.6:
            break
        exponent *= 2
    result = run_tool_call([make_power(False)], "power", {"exponent": exponent}, tool_use_id="t", timeout_s=0.2)
    assert result["is_error"] is True
    assert "over the limit of 0.2 s" in result["content"] or "did not finish within 0.2 s" in result["content"]
    assert str((3 ** exponent).bit_length()) not in result["content"]


def test_an_isolated_tool_that_holds_the_gil_is_stopped_at_the_deadline():
    started = time.perf_counter()
    result = run_tool_call([make_power(True)], "power", {"exponent": 25_000_000}, tool_use_id="t", timeout_s=0.5)
    elapsed = time.perf_counter() - started
    assert result["is_error"] is True and "did not finish within 0.5 s and was stopped" in result["content"]
    assert elapsed < 4  # the call itself takes several seconds; the kill does not wait for it


def test_a_stopped_tool_really_stops(tmp_path):
    marker = tmp_path / "still running"

    @tool(isolated=True)
    def slow_write() -> str:
        """Wait a second, then write a file."""
        time.sleep(1.0)
        marker.write_text("the tool was not stopped")
        return "done"

    result = run_tool_call([slow_write], "slow_write", {}, tool_use_id="t", timeout_s=0.2)
    assert result["is_error"] is True and "was stopped" in result["content"]
    time.sleep(1.5)
    assert not marker.exists()


def test_an_isolated_tool_reports_what_it_raised_and_what_it_cannot_send():
    @tool(isolated=True)
    def broken(kind: str) -> object:
        """Fail in one of several ways.

        Args:
            kind: How to fail.
        """
        if kind == "raise":
            raise ValueError("no such city")
        if kind == "exit":
            os._exit(3)
        return {1, 2}  # a set is not JSON

    def ask(kind):
        return run_tool_call([broken], "broken", {"kind": kind}, tool_use_id="t", timeout_s=10)

    assert ask("raise") == {"type": "tool_result", "tool_use_id": "t", "is_error": True,
                            "content": "broken failed: ValueError: no such city"}
    assert ask("exit")["content"] == "broken failed: the worker process exited (code 3) without a result"
    assert "cannot be sent as JSON" in ask("set")["content"] and ask("set")["is_error"] is True


def test_the_runners_agree_on_plain_results():
    def add(a, b):
        return {"sum": a + b}
    for run in (call_in_thread, call_in_process):
        outcome = run(add, {"a": 2, "b": 3}, 10, lambda value: str(sorted(value.items())))
        assert outcome.status == "ok" and outcome.value == "[('sum', 5)]"


def test_the_isolated_flag_is_checked_and_shown():
    assert repr(make_power(True)) == "Tool('power', isolated=True)"
    with pytest.raises(TypeError, match="isolated must be True or False"):
        tool(isolated="yes")(lambda: None)


@pytest.mark.parametrize("timeout_s, error", [(0, ValueError), (float("nan"), ValueError), ("1", TypeError),
                                              (True, TypeError)])
def test_a_bad_time_limit_is_a_programming_error(timeout_s, error):
    with pytest.raises(error, match="timeout_s"):
        run_tool_call(EXAMPLE_TOOLS, "calculator", {"expression": "1"}, tool_use_id="t", timeout_s=timeout_s)
