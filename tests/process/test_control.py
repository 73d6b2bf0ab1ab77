"""The control channel (process/control.py) and the lease (process/lease.py) through
run_command: real commands writing on fd 3, real pipes, real signals."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from cmdstalk_py.process import KillReason
from cmdstalk_py.process.control import (
    BUDGET,
    MAX_REQUEST,
    ControlError,
    ControlReader,
    parse_request,
)
from tests.process.aio import run

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def sh(script: str) -> list[str]:
    return ["/bin/bash", "-c", script]


pytestmark = pytest.mark.usefixtures("subreaper")


def test_parse_requests() -> None:
    assert parse_request(b"touch") == ("touch", None)
    assert parse_request(b"  BURY \r") == ("bury", None)
    assert parse_request(b"retry-after 7") == ("retry-after", 7)
    assert parse_request(b"progress 3 of 9 \xe2\x9c\x93") == ("progress", "3 of 9 \u2713")
    bad = [b"touch now", b"retry-after", b"retry-after -1", b"retry-after 1.5",
           b"retry-after 99999999999", b"retry-after \xd9\xa3", b"progress", b"explode",
           b"", b"x" * (MAX_REQUEST + 1)]  # fmt: skip
    for line in bad:
        with pytest.raises(ControlError):
            parse_request(line)


def test_requests_reach_the_callback_including_a_last_one_without_newline() -> None:
    lines: list[bytes] = []
    script = 'echo "$CMDSTALK_CONTROL_FD"; echo touch >&3; printf "\\n\\nprogress a\\n" >&3; ' \
        'printf "retry-after 7" >&3; exit 3'  # fmt: skip
    r = run(sh(script), b"", ENV, on_control=lines.append)
    assert (r.exit_code, r.stdout_tail) == (3, b"3\n")
    assert lines == [b"touch", b"progress a", b"retry-after 7"]


def test_no_channel_without_a_callback() -> None:
    r = run(sh('echo "[$CMDSTALK_CONTROL_FD]"; echo x >&3'), b"", ENV)
    assert r.stdout_tail == b"[]\n"
    assert b"Bad file descriptor" in r.stderr_tail


def test_only_the_command_holds_the_write_end() -> None:
    """The supervisor closes its copy after the spawn: the command's fd 3 is the only
    writer of that pipe in our process's view, and we hold just the read end."""
    seen: dict[str, int] = {}
    pids: list[int] = []

    def count_our_ends() -> None:
        inode = os.readlink(f"/proc/{pids[0]}/fd/3")
        ours = [fd for fd in os.listdir("/proc/self/fd") if _link(f"/proc/self/fd/{fd}") == inode]
        seen["ours"] = len(ours)
        seen["writable"] = sum(1 for fd in ours if _flags(fd) & os.O_WRONLY)

    r = run(sh("sleep 0.3"), b"", ENV, on_control=lambda _: None,
                    on_spawned=pids.append, on_started=count_our_ends)  # fmt: skip
    assert r.exit_code == 0
    assert seen == {"ours": 1, "writable": 0}


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _flags(fd: str) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    return 0


def test_garbage_and_floods_are_bounded_and_never_stall_the_run() -> None:
    lines: list[bytes] = []
    # 100 kB without a newline, then a flood of lines; stdout keeps working all along.
    script = (
        "head -c 100000 /dev/zero | tr '\\0' x >&3; echo >&3; "
        "yes touch | head -c 60000 >&3 & "
        "for i in $(seq 200); do echo out $i; done; wait; echo bury >&3; exit 1"
    )
    started = time.monotonic()
    r = run(sh(script), b"", ENV, on_control=lines.append, tail_bytes=100)
    elapsed = time.monotonic() - started
    assert r.exit_code == 1 and r.stdout_tail.endswith(b"out 200\n")
    # The long line arrives once, cut just past the limit (to be refused), not 8 MB of it.
    assert len(lines[0]) == MAX_REQUEST + 1
    assert all(len(line) <= MAX_REQUEST + 1 for line in lines)
    assert lines[-1] == b"bury" and lines.count(b"touch") == 60000 // 6
    # At most BUDGET bytes a second were read: the writer waited for the rest.
    assert 160000 / BUDGET - 1.5 <= elapsed < 30


def test_reader_budget_pauses_and_resumes() -> None:
    r, w = os.pipe()
    try:
        watched: list[bool] = []  # what the reader asked its owner (the loop) to do
        got: list[bytes] = []
        reader = ControlReader(r, got.append, watched.append, budget=8192)
        reader.start()
        assert watched == [True]
        os.write(w, b"touch\n" * 3000)
        assert reader.read(100.0) and reader.read(100.0)
        assert reader.paused_until == 101.0
        reader.on_readable(100.0)  # over budget: no longer watched
        assert watched[-1] is False
        reader.resume(101.0)
        assert watched[-1] is True
        assert got and set(got) == {b"touch"}
        reader.close()
        assert watched == [True, False, True, False]
    finally:
        os.close(w)


class MovingLease:
    """A lease that pushes its deadline out on each tick, up to a hard end."""

    def __init__(self, step: float, end: float) -> None:
        now = time.monotonic()
        self.at = now + step
        self.end = now + end
        self.step = step
        self.ticks = 0

    def attach(self, wake: Callable[[], None]) -> None:
        return None  # it moves only in tick()

    def deadline(self) -> tuple[float, KillReason]:
        if self.end <= self.at:
            return self.end, KillReason.MAX_RUNTIME
        return self.at, KillReason.TTR

    def next_tick(self) -> float | None:
        return self.at - self.step / 2

    def tick(self, now: float) -> None:
        self.ticks += 1
        self.at = now + self.step


def test_a_lease_moves_the_deadline_and_ends_at_its_bound() -> None:
    lease = MovingLease(step=0.2, end=1.0)
    started = time.monotonic()
    r = run(sh("exec sleep 30"), b"", ENV, lease=lease, grace=0.2)
    took = time.monotonic() - started
    assert r.killed is KillReason.MAX_RUNTIME and r.signal is not None
    assert 0.9 < took < 5 and lease.ticks >= 4
