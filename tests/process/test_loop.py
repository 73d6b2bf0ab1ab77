"""Many runs on one event loop: nothing a run does (its kill, its /proc work) holds the
loop or the other runs, and no thread is started per command."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from cmdstalk_py.loop.futures import CancelledError, ensure_future
from cmdstalk_py.loop.tools import gather, run, sleep, timeout
from cmdstalk_py.process import KillReason, ProcessResult, Switch, run_command
from cmdstalk_py.process.kill import POOL_WORKERS, in_pool
from tests.process.aio import open_fds, until

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def sh(script: str) -> list[str]:
    return ["/bin/bash", "-c", script]


def gone(pid: int) -> bool:
    """No such process: killed *and* reaped (a zombie still counts as there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def our_zombies() -> list[int]:
    zombies = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                zombies.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return zombies


@pytest.fixture
def slow_proc(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """psutil's scan of a process's children hangs (up to 20 s) until the event is set."""
    release = threading.Event()
    children = psutil.Process.children

    def slow(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
        release.wait(20)
        return children(self, recursive)

    monkeypatch.setattr(psutil.Process, "children", slow)
    try:
        yield release
    finally:
        release.set()


def test_a_slow_proc_never_holds_the_kill_point(slow_proc: threading.Event) -> None:
    pids: list[int] = []

    async def scenario() -> ProcessResult:
        task = ensure_future(
            run_command(
                sh("exec sleep 60"),
                b"",
                ENV,
                deadline=time.monotonic() + 0.2,
                grace=60,
                on_spawned=pids.append,
            )
        )
        try:
            # The scan of its tree hangs, yet the command gets its SIGTERM (and is reaped).
            await until(lambda: pids and gone(pids[0]), 10, "the command TERMed and reaped")
        finally:
            slow_proc.set()
        async with timeout(30):
            return await task

    result = run(scenario())
    assert (result.killed, result.signal, result.kill_signals) == (
        KillReason.TTR,
        15,
        ("SIGTERM",),
    )


class Threads:
    """Samples the threads of this process while the runs go on."""

    def __init__(self) -> None:
        self.before = {t.ident for t in threading.enumerate() if not _pool_thread(t)}
        self.others: set[int | None] = set()
        self.most_in_pool = 0

    async def sample(self, done: Callable[[], bool]) -> None:
        while not done():
            threads = threading.enumerate()
            self.others |= {t.ident for t in threads if not _pool_thread(t)} - self.before
            self.most_in_pool = max(self.most_in_pool, sum(map(_pool_thread, threads)))
            await sleep(0.005)


def _pool_thread(thread: threading.Thread) -> bool:
    return thread.name.startswith("cmdstalk-proc")


def test_a_stop_switch_kills_fifty_commands_on_one_loop_without_a_thread_each() -> None:
    stop = Switch()
    started: list[int] = []
    threads = Threads()

    async def scenario() -> list[ProcessResult]:
        runs = ensure_future(
            gather(
                *(
                    run_command(
                        sh("exec sleep 30"),
                        b"",
                        ENV,
                        grace=30,
                        stop=stop,
                        on_started=lambda: started.append(1),
                    )
                    for _ in range(50)
                )
            )
        )
        sampler = ensure_future(threads.sample(runs.done))
        await until(lambda: len(started) == 50, 30, "50 commands started")
        stop.set()
        async with timeout(60):
            results = await runs
        await sampler
        return results

    results = run(scenario())
    assert [(r.killed, r.signal) for r in results] == [(KillReason.SHUTDOWN, 15)] * 50
    assert threads.others == set()  # no thread per command (nor any other)
    assert threads.most_in_pool <= POOL_WORKERS
    assert our_zombies() == []


def test_two_hundred_commands_on_one_loop_all_finish_with_their_output() -> None:
    # Half get a payload larger than a pipe holds (written as the pipe takes it).
    payloads = [os.urandom(100_000 if i % 2 else 100) for i in range(200)]

    async def scenario() -> list[ProcessResult]:
        return await gather(
            *(
                run_command(sh(f"echo err {i} >&2; sha256sum"), payload, ENV)
                for i, payload in enumerate(payloads)
            )
        )

    results = run(scenario())
    for i, (result, payload) in enumerate(zip(results, payloads, strict=True)):
        assert result.exit_code == 0, result
        assert result.stdout_tail == hashlib.sha256(payload).hexdigest().encode() + b"  -\n"
        assert result.stderr_tail == f"err {i}\n".encode()


def test_cancelling_run_command_kills_and_reaps_the_command() -> None:
    pids: list[int] = []
    fds_before = open_fds()

    async def scenario() -> None:
        task = ensure_future(
            run_command(
                sh("trap '' TERM; exec sleep 60"), b"x" * 100_000, ENV, on_spawned=pids.append
            )
        )
        await until(lambda: pids, message="the command spawned")
        task.cancel()
        with pytest.raises(CancelledError):
            await task
        assert gone(pids[0])  # by the time the cancellation is through

    run(scenario())
    assert our_zombies() == []
    assert open_fds() == fds_before


class MovableLease:
    """A deadline far away that its owner moves (and tells the run by ``wake``)."""

    def __init__(self) -> None:
        self.at = time.monotonic() + 3600
        self.wake: Callable[[], None] | None = None

    def attach(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def deadline(self) -> tuple[float, KillReason]:
        return self.at, KillReason.MAX_RUNTIME

    def next_tick(self) -> float | None:
        return None

    def tick(self, now: float) -> None:
        return None


def test_a_lease_that_wakes_the_run_with_an_earlier_deadline_kills_at_once() -> None:
    lease = MovableLease()

    def on_line(line: bytes) -> None:
        # The owner learns something (a reply on its connection) and moves the deadline.
        assert lease.wake is not None
        lease.at = time.monotonic()
        lease.wake()

    async def scenario() -> ProcessResult:
        command = run_command(sh("echo ready; exec sleep 60"), b"", ENV, lease=lease, grace=5,
                          on_stdout_line=on_line)  # fmt: skip
        async with timeout(30):  # the lease's first deadline is an hour away
            return await command

    result = run(scenario())
    assert (result.killed, result.signal) == (KillReason.MAX_RUNTIME, 15)


def test_a_pool_job_cancelled_before_it_started_never_runs() -> None:
    # A kill given up (its waiter cancelled) must not send signals still queued in the pool.
    release = threading.Event()
    ran: list[int] = []

    async def scenario() -> None:
        busy = [in_pool(release.wait, 20) for _ in range(POOL_WORKERS)]
        queued = in_pool(ran.append, 1)  # behind the busy ones
        assert queued.cancel()
        release.set()
        await gather(*busy)
        await in_pool(ran.append, 2)  # the pool is first in, first out: it ran after 1 would

    run(scenario())
    assert ran == [2]
