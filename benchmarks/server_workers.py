"""Worker processes for the server benchmark's load generator.

A workload is a ``Task``: ``prepare()`` opens its connections (not timed), ``run()`` does the
measured work and returns how many operations completed. ``run_tasks`` runs tasks in forked
worker processes that start together on a barrier, and lets the caller sample the server
process around exactly the measured interval.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Protocol

from server_loadgen import (
    IO_TIMEOUT,
    Address,
    ProtocolError,
    cycles_blocking,
    cycles_multiplexed,
    drain,
    open_connection,
    put_pipelined,
)


class Task(Protocol):
    """One worker process's share of a workload."""

    def prepare(self) -> None:
        """Open connections; not timed."""

    def run(self) -> int:
        """Do the measured work; return the number of operations completed."""

    def close(self) -> None:
        """Close connections."""


class _Connections:
    def __init__(self, address: Address, tube: str, count: int = 1) -> None:
        self.address = address
        self.tube = tube
        self.count = count
        self.socks: list[socket.socket] = []

    def prepare(self) -> None:
        self.socks = [open_connection(self.address, self.tube) for _ in range(self.count)]

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks = []


class PutTask(_Connections):
    """Pipelined puts on one connection."""

    def __init__(
        self, address: Address, tube: str, jobs: int, window: int, seconds: float | None = None
    ) -> None:
        super().__init__(address, tube)
        self.jobs = jobs
        self.window = window
        self.seconds = seconds

    def run(self) -> int:
        return put_pipelined(self.socks[0], self.jobs, self.window, self.seconds)


class CycleTask(_Connections):
    """``conns`` request/response clients doing put → reserve → delete for ``duration`` s."""

    def __init__(self, address: Address, tube: str, conns: int, duration: float) -> None:
        super().__init__(address, tube, conns)
        self.duration = duration

    def run(self) -> int:
        if len(self.socks) == 1:
            # A lone client blocks on its socket: one syscall fewer per reply than epoll.
            return cycles_blocking(self.socks[0], self.duration)
        return cycles_multiplexed(self.socks, self.duration)


class DrainTask(_Connections):
    """One connection reserving and deleting ``quota`` ready jobs, pipelined."""

    def __init__(self, address: Address, tube: str, quota: int, window: int) -> None:
        super().__init__(address, tube)
        self.quota = quota
        self.window = window

    def run(self) -> int:
        return drain(self.socks[0], self.quota, self.window)


@dataclass(frozen=True)
class WorkerResult:
    """What one worker did between the start barrier and its last reply."""

    ops: int
    started: float  # time.monotonic(), comparable across processes on Linux
    finished: float
    cpu: float  # the worker's own CPU seconds during run()


@dataclass(frozen=True)
class RunResult:
    """A whole workload: every worker's result and the interval the caller sampled."""

    workers: list[WorkerResult]

    @property
    def ops(self) -> int:
        return sum(w.ops for w in self.workers)

    @property
    def seconds(self) -> float:
        return max(w.finished for w in self.workers) - min(w.started for w in self.workers)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    @property
    def loadgen_cpu(self) -> float:
        return sum(w.cpu for w in self.workers)


def _worker(task: Task, barrier: Barrier, results: Queue[object]) -> None:
    try:
        task.prepare()
        barrier.wait(IO_TIMEOUT)
        cpu0 = time.process_time()
        started = time.monotonic()
        ops = task.run()
        finished = time.monotonic()
        results.put(WorkerResult(ops, started, finished, time.process_time() - cpu0))
        task.close()
    except BaseException as exc:  # reported to the parent, which raises it
        barrier.abort()
        results.put(f"{type(exc).__name__}: {exc}")


def run_tasks(
    tasks: Sequence[Task],
    on_start: Callable[[], None] = lambda: None,
    on_end: Callable[[], None] = lambda: None,
) -> RunResult:
    """Run each task in its own forked process, all released together.

    ``on_start`` runs in the parent when the barrier releases the workers and ``on_end``
    when the last result has arrived, so the caller can sample the server's CPU over the
    measured interval only.
    """
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(tasks) + 1)
    results: Queue[object] = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(t, barrier, results), daemon=True) for t in tasks]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait(IO_TIMEOUT)
        except Exception as exc:
            reason = results.get(timeout=5)
            raise ProtocolError(f"load generator failed to start: {reason}") from exc
        on_start()
        collected = [results.get(timeout=IO_TIMEOUT * 4) for _ in tasks]
        on_end()
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r for r in collected if not isinstance(r, WorkerResult)]
    if errors:
        raise ProtocolError(f"load generator failed: {errors[0]}")
    return RunResult([r for r in collected if isinstance(r, WorkerResult)])
