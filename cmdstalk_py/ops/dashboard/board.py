"""``Board``: what the dashboard knows about jobs, fed by the supervisor's Observer hooks.

Brokers call the hooks from their threads; the dashboard reads snapshots from its own
threads (``offload``); one lock guards both, held only to copy. Everything from a job (its
output, its stderr tail) is kept as text decoded with replacement and is escaped by the
page, never trusted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from cmdstalk_py.client.names import DEFAULT_PORT, parse_address
from cmdstalk_py.ops.eventlog import signal_name
from cmdstalk_py.ops.observers import JobStart, Observer
from cmdstalk_py.supervisor.results import JobResult, Outcome

LINES = 20  # output lines kept per running job
LINE_CHARS = 400  # a longer line is cut: a page shows lines, not files
FINISHED = 100  # finished jobs kept
TAIL_LINES = 20  # stderr tail lines of a finished job


@dataclass
class Running:
    """One running job."""

    start: JobStart
    output: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=LINES))

    def as_json(self, now: float) -> dict[str, Any]:
        s = self.start
        return {
            "pool": s.pool,
            "server": s.server,
            "tube": s.tube,
            "slot": s.slot,
            "job_id": s.job_id,
            "pid": s.pid,
            "ttr": s.ttr,
            "limit": s.limit,
            "limit_kind": s.limit_kind,
            "started_at": s.started_at,
            "elapsed": round(max(0.0, now - s.started_at), 1),
            "output": [text for _, text in self.output],
            "streams": [stream for stream, _ in self.output],
        }


@dataclass
class Finished:
    """One finished job, and what a dashboard action did to it since (``kicked``,
    ``deleted``): the page offers no second kick of a job already kicked."""

    result: JobResult
    acted: str | None = None

    def of(self, address: tuple[str, int], job_id: int) -> bool:
        """Whether this is job ``job_id`` of the server at ``address``."""
        if self.result.job_id != job_id:
            return False
        if not self.result.server:  # none recorded: the job can only be the one server's
            return True
        try:
            return parse_address(self.result.server, DEFAULT_PORT) == address
        except ValueError:
            return False


def finished_json(f: Finished) -> dict[str, Any]:
    """A finished job as the page shows it."""
    r = f.result
    tail = r.stderr_tail.rstrip("\n").split("\n")[-TAIL_LINES:] if r.stderr_tail else []
    return {
        "tube": r.tube,
        "server": r.server or None,  # what a kick or delete of this job must name
        "slot": r.slot,
        "job_id": r.job_id,
        "outcome": r.outcome.value,
        "failed": r.outcome is not Outcome.DELETED,
        "exit_code": r.exit_code,
        "signal": signal_name(r.signal),
        "duration_ms": round(r.duration_ms, 1),
        "ended_at": r.ended_at,
        "release_delay": r.release_delay,
        # What its tree cost (null: not known, e.g. never run or not sampled).
        "peak_memory_bytes": r.peak_memory_bytes,
        "cpu_s": round(r.cpu_s, 3) if r.cpu_s is not None else None,
        "procs": r.procs,
        "stderr_tail": [line[:LINE_CHARS] for line in tail],
        "error": r.error,
        "acted": f.acted,
    }


class Board(Observer):
    """Running and finished jobs, and the supervisor's state, for the dashboard.

    A running job is found by its broker (``worker``, ``slot``: how ``broker_busy`` names
    it) and, for its output lines, by its own tube, slot and id (how ``job_output`` does).
    """

    def __init__(self, clock: Any = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], Running] = {}
        self._by_job: dict[tuple[str, int, int], Running] = {}
        self._finished: deque[Finished] = deque(maxlen=FINISHED)
        self._reconnects: dict[str, tuple[int, float]] = {}
        self.state = "starting"

    # -- hooks (broker threads) ------------------------------------------------------------

    def job_started(self, start: JobStart) -> None:
        running = Running(start)
        with self._lock:
            self._forget((start.worker, start.slot))
            self._running[(start.worker, start.slot)] = running
            self._by_job[(start.tube, start.slot, start.job_id)] = running

    def job_output(self, tube: str, slot: int, job_id: int, stream: str, line: bytes) -> None:
        text = line[: LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r\n")[:LINE_CHARS]
        with self._lock:
            running = self._by_job.get((tube, slot, job_id))
            if running is not None:
                running.output.append((stream, text))

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        if not busy:  # the command ended (its result may be reported later)
            with self._lock:
                self._forget((tube, slot))

    def _forget(self, worker: tuple[str, int]) -> None:
        running = self._running.pop(worker, None)
        if running is not None:
            s = running.start
            self._by_job.pop((s.tube, s.slot, s.job_id), None)

    def job_finished(self, result: JobResult) -> None:
        with self._lock:
            self._finished.append(Finished(result))

    def acted(self, address: tuple[str, int], job_id: int, what: str) -> None:
        """A dashboard action ``what`` (kicked, deleted) was done to job ``job_id`` of the
        server at ``address``: the rows it has now say so (a later failure is a new row)."""
        with self._lock:
            for finished in self._finished:
                if finished.of(address, job_id):
                    finished.acted = what

    def reconnected(self, where: str, address: str) -> None:
        with self._lock:
            count, _ = self._reconnects.get(where, (0, 0.0))
            self._reconnects[where] = (count + 1, self._clock())

    def ready(self) -> None:
        self.state = "running"

    def stopping(self) -> None:
        self.state = "draining"

    # -- snapshots (server threads) --------------------------------------------------------

    def running(self) -> list[dict[str, Any]]:
        """Running jobs by pool, tube and slot, elapsed as of now."""
        now = self._clock()
        with self._lock:
            jobs = sorted(
                self._running.values(), key=lambda r: (r.start.pool, r.start.tube, r.start.slot)
            )
            return [r.as_json(now) for r in jobs]

    def finished(self) -> list[dict[str, Any]]:
        """The latest finished jobs, failures first, newest first within each."""
        with self._lock:  # copies only: the brokers' hooks wait on this lock
            copies = [Finished(f.result, f.acted) for f in self._finished]
        results = [finished_json(f) for f in copies]
        results.reverse()
        results.sort(key=lambda r: not r["failed"])  # stable: keeps newest first
        return results

    def reconnects(self) -> dict[str, tuple[int, float]]:
        """Reconnections per broker (``tube:slot``) or dispatcher: (count, last time)."""
        with self._lock:
            return dict(self._reconnects)
