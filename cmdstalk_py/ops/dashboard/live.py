"""``LiveUsage``: what each running job's process tree uses right now (resident memory, CPU
seconds so far, processes alive), read from /proc for the page.

The reading is ``process.usage``'s own (``read_table``: one ``/proc/PID/stat`` read per
process on the host; ``tree``: the command's descendants and session), made by whoever
renders ``/api/running`` or ``/api/state``: a dashboard thread (``offload``), never the
supervisor's loop. Its cost is bounded whatever the number of viewers or processes:

- one scan serves every viewer for ``INTERVAL`` seconds (viewers arriving during a scan
  wait for that one, under the lock); none is made while no job runs or nobody looks;
- after a scan (and the trees taken from it) cost T seconds, the next waits at least
  ``COST_RATIO`` × T: on a host with very many processes the dashboard takes at most
  1/``COST_RATIO`` of one core for this, and shows older figures instead.

A job that started after the scan it would be read from shows no figures (None) until the
next one: its pid in that table could only be another process's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from cmdstalk_py.process.usage import Stat, read_table, tree

INTERVAL = 1.0  # seconds a scan serves every viewer
COST_RATIO = 20.0  # a scan that took T waits at least this × T before the next


class LiveFigures(NamedTuple):
    """A running job's tree now."""

    memory_bytes: int  # resident memory, summed over the live processes
    cpu_s: float  # user + system seconds of the tree so far (with the children it waited for)
    procs: int  # processes alive


def figures_of(procs: list[Stat]) -> LiveFigures | None:
    """The figures of one tree, None when none of it was found."""
    if not procs:
        return None
    alive = [p for p in procs if not p.zombie]
    cpu = sum(p.cpu + p.reaped_cpu for p in procs)
    return LiveFigures(sum(p.rss for p in alive), cpu, len(alive))


class LiveUsage:
    """``of(jobs)``: the ``LiveFigures`` (or None) of each ``(pid, started_at)``, from a
    scan of /proc at most ``interval`` seconds old (older when scans are expensive).

    ``read`` scans the process table; ``clock`` measures the interval and the cost,
    ``wall`` is the clock of ``started_at`` (epoch seconds, as ``JobStart`` gives it).
    """

    def __init__(
        self,
        read: Callable[[], dict[int, Stat]] = read_table,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        interval: float = INTERVAL,
    ) -> None:
        self.scans = 0  # how many were made (tests: one per interval under a flood)
        self._read, self._clock, self._wall, self._interval = read, clock, wall, interval
        self._lock = threading.Lock()
        self._table: dict[int, Stat] | None = None
        self._taken_at = 0.0  # wall time the scan began
        self._began = 0.0  # clock time the scan began
        self._spent = 0.0  # seconds spent on this scan and the trees taken from it
        self._next = 0.0  # clock time before which no new scan is made
        self._trees: dict[int, LiveFigures | None] = {}  # by pid, from this scan

    def of(self, jobs: Sequence[tuple[int, float]]) -> list[LiveFigures | None]:
        if not jobs:
            return []  # nothing runs: no scan at all
        with self._lock:
            began = self._clock()
            if self._table is None or began >= self._next:
                self._scan(began)
            figures = [self._tree(pid, started_at) for pid, started_at in jobs]
            self._spent += self._clock() - began
            self._next = self._began + max(self._interval, COST_RATIO * self._spent)
            return figures

    def _scan(self, began: float) -> None:
        taken_at = self._wall()
        try:
            table = self._read()
        except OSError:  # /proc unreadable (hidepid, a container): no figures, not an error
            table = {}
        self._table, self._taken_at, self._began = table, taken_at, began
        self._spent, self._trees = 0.0, {}
        self.scans += 1

    def _tree(self, pid: int, started_at: float) -> LiveFigures | None:
        if self._table is None or started_at > self._taken_at:
            return None
        if pid not in self._trees:
            self._trees[pid] = figures_of(tree(self._table, pid))
        return self._trees[pid]
