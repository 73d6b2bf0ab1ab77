"""A chunk's output lines go out a turn at a time, the loop polling in between: on
``OutputStream`` alone, and through ``run_command`` with real commands and pipes."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.tools import run
from cmdstalk_py.process import ProcessResult, run_command
from cmdstalk_py.process.output import LINES_PER_TURN, LineBudget, OutputStream
from tests.helpers import wait_until

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
LINES = 20_000


def numbers(last: int) -> list[bytes]:
    return [str(i).encode() for i in range(1, last + 1)]


# -- OutputStream (pure) ------------------------------------------------------------------


def feed_in_turns(stream: OutputStream, chunk: bytes, calls: list[int], got: list[bytes]) -> None:
    """Feed ``chunk`` and call ``more`` until it is taken; ``calls`` gets how many lines
    each call handed on."""
    before = len(got)
    done = stream.feed(chunk)
    calls.append(len(got) - before)
    while not done:
        before = len(got)
        done = stream.more()
        calls.append(len(got) - before)
    assert not stream.busy


chunks = st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\0", b"\n")), max_size=12)


@given(chunks, st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=4))
def test_lines_and_pieces_over_turns_are_those_of_one_pass(
    data: list[bytes], max_line: int, turn: int
) -> None:
    whole: list[bytes] = []
    one_pass = OutputStream(5, whole.append, max_line, turn=1_000_000)
    got: list[bytes] = []
    calls: list[int] = []
    turns = OutputStream(5, got.append, max_line, turn=turn)
    for chunk in data:
        assert one_pass.feed(chunk)
        feed_in_turns(turns, chunk, calls, got)
    one_pass.finish()
    turns.finish()
    joined = b"".join(data)
    assert got == whole
    assert b"".join(got) == joined.replace(b"\n", b"")
    assert max(calls, default=0) <= turn
    assert turns.tail == joined[-5:]
    assert turns.total_bytes == len(joined)


@given(chunks, st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=4))
def test_a_line_budget_over_turns_hands_on_the_first_lines_and_counts_the_rest(
    data: list[bytes], burst: int, turn: int
) -> None:
    got: list[bytes] = []
    drops: list[int] = []
    budget = LineBudget(rate=1.0, burst=burst, on_drop=drops.append, clock=lambda: 0.0)
    stream = OutputStream(0, got.append, 10_000, budget, turn=turn)
    for chunk in data:
        feed_in_turns(stream, chunk, [], got)
    stream.finish()
    expected = b"".join(data).split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    assert got == expected[:burst]
    assert budget.dropped == sum(drops) == len(expected) - len(got)


def test_a_chunk_of_many_lines_goes_out_lines_per_turn_at_a_time() -> None:
    got: list[bytes] = []
    stream = OutputStream(16, got.append)
    data = b"".join(line + b"\n" for line in numbers(LINES))
    assert not stream.feed(data)
    assert len(got) == LINES_PER_TURN
    with pytest.raises(RuntimeError):
        stream.feed(b"more\n")  # lines of the last chunk come first
    calls: list[int] = []
    while stream.busy:
        before = len(got)
        stream.more()
        calls.append(len(got) - before)
    assert got == numbers(LINES)
    assert max(calls) == LINES_PER_TURN
    assert stream.tail == data[-16:]


# -- run_command: real pipes --------------------------------------------------------------


class Polls:
    """Counts the loop's polls: it stands in for the loop's epoll object and passes every
    call on. (A callback that counts its turns would not do: this loop handles a poll's
    events before the callbacks queued earlier, so lines read at a poll would count with
    the turn before it.)"""

    def __init__(self, loop: Loop) -> None:
        self.epoll = loop.epoll
        self.count = 0
        loop.epoll = self  # type: ignore[assignment]

    def poll(self, timeout: float = -1) -> list[tuple[int, int]]:
        self.count += 1
        return self.epoll.poll(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.epoll, name)


Stamped = dict[str, list[tuple[int, bytes]]]  # per stream: (the polls before it, the line)


def run_stamped(
    script: str, on_spawned: Callable[[int], None] | None = None
) -> tuple[ProcessResult, Stamped, LineBudget]:
    """Run ``script`` with a generous line budget and its loop's polls counted: the result,
    and each stream's lines with the loop iteration (the poll) each came in."""
    stamped: Stamped = {"out": [], "err": []}
    budget = LineBudget(rate=1000, burst=10 * LINES)

    async def scenario() -> ProcessResult:
        loop = get_running_loop()
        polls = Polls(loop)
        try:
            return await run_command(
                ["/bin/bash", "-c", script],
                b"",
                ENV,
                on_stdout_line=lambda line: stamped["out"].append((polls.count, line)),
                on_stderr_line=lambda line: stamped["err"].append((polls.count, line)),
                line_budget=budget,
                on_spawned=on_spawned,
            )
        finally:
            loop.epoll = polls.epoll

    return run(scenario()), stamped, budget


def lines_of(stamped: Stamped, name: str) -> list[bytes]:
    return [line for _, line in stamped[name]]


def most_in_one_iteration(stamped: Stamped, name: str) -> int:
    return max(Counter(tick for tick, _ in stamped[name]).values(), default=0)


def test_a_burst_of_lines_reaches_the_callbacks_in_order_and_the_loop_polls_between_turns() -> None:
    # seq writes 4 KiB at a time, 680 or more of these lines: one read holds more than a turn.
    result, stamped, budget = run_stamped(f"seq 1 {LINES}; seq 1 {LINES} >&2; printf 'no newline'")
    assert result.exit_code == 0
    assert lines_of(stamped, "out") == [*numbers(LINES), b"no newline"]
    assert lines_of(stamped, "err") == numbers(LINES)
    assert budget.dropped == 0
    assert most_in_one_iteration(stamped, "out") <= LINES_PER_TURN
    assert most_in_one_iteration(stamped, "err") <= LINES_PER_TURN
    assert result.stdout_tail.endswith(b"\n19999\n20000\nno newline")
    assert result.stderr_tail.endswith(b"\n19999\n20000\n")


def test_lines_left_in_the_pipes_at_the_exit_go_out_in_turns_too() -> None:
    # Under 64 KiB each: the command writes it all and exits before anything is read (the
    # loop is held until it has exited), so every line is taken after the exit.
    last = 10_000

    def wait_for_the_exit(pid: int) -> None:
        exited = os.WEXITED | os.WNOWAIT | os.WNOHANG  # not reaped: the run does that
        wait_until(lambda: os.waitid(os.P_PID, pid, exited), 30, message="the command's exit")

    result, stamped, budget = run_stamped(
        f"seq 1 {last}; seq 1 {last} >&2", on_spawned=wait_for_the_exit
    )
    assert result.exit_code == 0
    assert lines_of(stamped, "out") == lines_of(stamped, "err") == numbers(last)
    assert budget.dropped == 0
    assert most_in_one_iteration(stamped, "out") <= LINES_PER_TURN
    assert most_in_one_iteration(stamped, "err") <= LINES_PER_TURN
