"""``Board``: what the dashboard knows about jobs, fed by the supervisor's Observer hooks.

Brokers call the hooks from their threads; pages read snapshots from the server's threads;
one lock guards both, held only to copy. Everything from a job (its output, its stderr
tail) is kept as text decoded with replacement and is escaped by the page, never trusted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from cmdstalk_py.ops.eventlog import signal_name
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.results import JobResult, Outcome

LINES = 20  # output lines kept per running job
LINE_CHARS = 400  # a longer line is cut: a page shows lines, not files
FINISHED = 100  # finished jobs kept
TAIL_LINES = 20  # stderr tail lines of a finished job


@dataclass
class Running:
    """One running job."""

    pool: str | None
    tube: str
    slot: int
    job_id: int
    pid: int
    ttr: int
    started_at: float
    output: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=LINES))

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "tube": self.tube,
            "slot": self.slot,
            "job_id": self.job_id,
            "pid": self.pid,
            "ttr": self.ttr,
            "started_at": self.started_at,
            "elapsed": round(max(0.0, now - self.started_at), 1),
            "output": [text for _, text in self.output],
            "streams": [stream for stream, _ in self.output],
        }


def finished_json(r: JobResult) -> dict[str, Any]:
    """A finished job as the page shows it."""
    tail = r.stderr_tail.rstrip("\n").split("\n")[-TAIL_LINES:] if r.stderr_tail else []
    return {
        "tube": r.tube,
        "slot": r.slot,
        "job_id": r.job_id,
        "outcome": r.outcome.value,
        "failed": r.outcome is not Outcome.DELETED,
        "exit_code": r.exit_code,
        "signal": signal_name(r.signal),
        "duration_ms": round(r.duration_ms, 1),
        "ended_at": r.ended_at,
        "release_delay": r.release_delay,
        "stderr_tail": [line[:LINE_CHARS] for line in tail],
        "error": r.error,
    }


class Board(Observer):
    """Running and finished jobs, and the supervisor's state, for the dashboard.

    ``pool``: the name of the pool this supervisor runs (one per process today; a hook
    that carries the pool replaces it when one process runs several).
    """

    def __init__(self, pool: str | None = None, clock: Any = time.time) -> None:
        self.pool = pool
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], Running] = {}
        self._finished: deque[JobResult] = deque(maxlen=FINISHED)
        self._reconnects: dict[str, tuple[int, float]] = {}
        self.state = "starting"

    # -- hooks (broker threads) ------------------------------------------------------------

    def job_started(
        self, tube: str, slot: int, job_id: int, pid: int, ttr: int, started_at: float
    ) -> None:
        with self._lock:
            self._running[(tube, slot)] = Running(
                self.pool, tube, slot, job_id, pid, ttr, started_at
            )

    def job_output(self, tube: str, slot: int, job_id: int, stream: str, line: bytes) -> None:
        text = line[: LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r\n")[:LINE_CHARS]
        with self._lock:
            running = self._running.get((tube, slot))
            if running is not None and running.job_id == job_id:
                running.output.append((stream, text))

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        if not busy:  # the command ended (its result may be reported later)
            with self._lock:
                self._running.pop((tube, slot), None)

    def job_finished(self, result: JobResult) -> None:
        with self._lock:
            self._finished.append(result)

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
        """Running jobs by tube and slot, elapsed as of now."""
        now = self._clock()
        with self._lock:
            jobs = sorted(self._running.values(), key=lambda r: (r.tube, r.slot))
            return [r.as_json(now) for r in jobs]

    def finished(self) -> list[dict[str, Any]]:
        """The latest finished jobs, failures first, newest first within each."""
        with self._lock:
            results = list(self._finished)
        results.reverse()
        results.sort(key=lambda r: r.outcome is Outcome.DELETED)  # stable: keeps newest first
        return [finished_json(r) for r in results]

    def reconnects(self) -> dict[str, tuple[int, float]]:
        """Reconnections per broker (``tube:slot``) or dispatcher: (count, last time)."""
        with self._lock:
            return dict(self._reconnects)
