"""Which held-back / servable changes of a tube the event log records, and the log says.

A tube at its limit with jobs queued flips at every job: the job ends (servable: a slot is
free), and a moment later the next one starts (held again). The gate reports each flip, as
it should for metrics; an event log that wrote them all would hold two records per job and
say nothing a reader wants to know. So a servable change waits ``SETTLE`` seconds: if the
tube is held again by then, for the same reason, it never really stopped being held and
neither change is written. A held change is written at once, unless it only undoes such a
pending servable. ``HoldSettler`` is pure: the caller passes the clock in and asks for what
became due. ``HoldLog`` writes the settled changes as log lines (the supervisor's own
observer); the event log (``eventlog.py``) writes them as records.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cmdstalk_py.ops.observers import Observer, TubeHold

log = logging.getLogger("cmdstalk.dispatcher")

#: Seconds a tube must stay servable before its servable record is written.
SETTLE = 1.0


@dataclass(frozen=True, slots=True)
class Change:
    """A change to write: what the gate reported, and when (epoch seconds)."""

    hold: TubeHold
    at: float


@dataclass(frozen=True, slots=True)
class _Pending:
    change: Change
    due: float  # monotonic seconds


class HoldSettler:
    """The held/servable state of each (pool, tube) as written, and the servable changes
    waiting to settle. Not thread-safe: the event log calls it under its own lock."""

    def __init__(self, settle: float = SETTLE) -> None:
        self.settle = settle
        self._written: dict[tuple[str, str], str | None] = {}  # the last reason written
        self._pending: dict[tuple[str, str], _Pending] = {}

    def change(self, hold: TubeHold, at: float, now: float) -> list[Change]:
        """The gate reported ``hold`` at epoch ``at`` (monotonic ``now``): what to write now."""
        key = (hold.pool, hold.tube)
        if hold.reason is None:
            if self._written.get(key) is not None:  # held as written: servable after settling
                self._pending[key] = _Pending(Change(hold, at), now + self.settle)
            return []
        self._pending.pop(key, None)
        if self._written.get(key) == hold.reason:
            return []  # held again before its servable record was due: still held
        self._written[key] = hold.reason
        return [Change(hold, at)]

    def due(self, now: float) -> tuple[list[Change], float]:
        """The servable changes that have settled by ``now``, and the seconds until the next
        one will (inf: none pending)."""
        ready = [key for key, pending in self._pending.items() if pending.due <= now]
        out = [self._settle(key) for key in ready]
        left = min((p.due for p in self._pending.values()), default=math.inf)
        return out, left - now

    def flush(self) -> list[Change]:
        """Every pending servable change, settled or not (the log is closing)."""
        return [self._settle(key) for key in list(self._pending)]

    def _settle(self, key: tuple[str, str]) -> Change:
        pending = self._pending.pop(key)
        self._written[key] = None
        return pending.change


class HoldLog(Observer):
    """Logs a pool's tube held back by its limit or rate, and servable again, settled as
    the event log's records are: a busy tube at its limit would otherwise log two lines a
    job. A servable line comes at the first heartbeat after it settled (or at close)."""

    def __init__(self, settle: float = SETTLE, clock: Callable[[], float] = time.monotonic):
        self._settler = HoldSettler(settle)
        self._clock = clock
        # Held while writing too: one tube's lines stay in the order of its changes.
        self._lock = threading.Lock()

    def tube_held(self, hold: TubeHold) -> None:
        with self._lock:
            self._write(self._settler.change(hold, time.time(), self._clock()))

    def heartbeat(self) -> None:
        with self._lock:
            self._write(self._settler.due(self._clock())[0])

    def close(self) -> None:
        with self._lock:
            self._write(self._settler.flush())

    @staticmethod
    def _write(changes: list[Change]) -> None:
        for change in changes:
            hold = change.hold
            if hold.reason is None:
                log.info("pool %s: tube %s servable again", hold.pool, hold.tube)
            else:
                log.info("pool %s: tube %s held back by its %s (%d running)", hold.pool,
                         hold.tube, hold.reason, hold.running)  # fmt: skip
