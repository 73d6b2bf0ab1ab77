"""What a command's process tree uses: the figures of every run, and the limits (issue #29).

Two sources. At the exit, ``os.wait4`` gives the command's rusage (``from_rusage``): its
peak resident memory and its user + system CPU, counting every descendant that was waited
for; nearly free, so every run reports it (not its peak memory: see ``Usage.from_rusage``).
And every run's tree is sampled from /proc (``Sampler``): the sum of its processes'
resident memory, its CPU and how many processes are alive; the figures of a run are the
larger of both. While a limit is set, every ``SAMPLE_INTERVAL`` seconds from the spawn;
without one, every ``ACCOUNT_INTERVAL`` seconds from one interval after the spawn, so a
command that ends sooner costs no scan at all (and its peak memory is not known).

A sample reads ``/proc/PID/stat`` of every process on the host (one read each gives the
parent, session, state, CPU and RSS), in ``kill.py``'s thread pool so that the loop never
waits on /proc; the runs sampling at the same moment share one scan (``_shared_scan``). The
tree is every descendant of the (unreaped) command plus every member of its session. What
left both (a double fork that ``setsid``-ed) is not counted: only a cgroup would see it.
Resident memory counts shared pages once per process that maps them, so a tree of many
small processes reads a little high.

A limited run in its own cgroup (``jobcgroup.py``) is sampled from the cgroup's counters
instead (``CgroupSampler``): every process it ever held counts, exactly.
"""

from __future__ import annotations

import contextlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from cmdstalk_py.process.kill import in_pool
from cmdstalk_py.process.result import KillReason, Usage

if TYPE_CHECKING:
    from cmdstalk_py.loop.core import Loop
    from cmdstalk_py.loop.futures import Future
    from cmdstalk_py.process.jobcgroup import Figures, JobCgroup

_R = TypeVar("_R")  # what one sample reads

#: Seconds between two samples of a limited command's tree. A limit is caught at most this
#: long (plus the scan, plus ``escalation.SCAN_WAIT`` before the first signal) after the tree
#: crossed it: the overshoot of ``--max-memory`` is what the tree allocates in that time.
SAMPLE_INTERVAL = 0.1
#: Seconds between two samples of a command without limits, for its figures only.
ACCOUNT_INTERVAL = 1.0

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = float(os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one command's tree; None: no bound of that kind."""

    memory: int | None = None  # bytes of resident memory, summed over the tree
    cpu: float | None = None  # seconds of user + system CPU of the whole tree
    procs: int | None = None  # processes alive in the tree at once

    @property
    def any(self) -> bool:
        return self.memory is not None or self.cpu is not None or self.procs is not None


#: A run without limits: sampled for its figures only.
NO_LIMITS = Limits()


class Stat(NamedTuple):
    """One ``/proc/PID/stat`` line, the fields a sample needs."""

    pid: int
    ppid: int
    session: int
    zombie: bool
    cpu: float  # its own user + system seconds
    reaped_cpu: float  # of the children it waited for (cutime + cstime)
    rss: int  # bytes
    start: int  # start time in clock ticks: with the pid, a process's identity


def parse_stat(text: str) -> Stat | None:
    """A ``/proc/PID/stat`` line; None if it is not one (the command name may hold
    spaces and parentheses, so the fields are counted from the last ``)``)."""
    pid, _, rest = text.partition(" (")
    fields = rest[rest.rfind(")") + 2 :].split()
    if len(fields) < 22 or not pid.isdigit():
        return None
    # fields[0] is stat's field 3 (state): field N is fields[N - 3].
    ticks = [int(v) for v in fields[11:15]]  # utime stime cutime cstime
    return Stat(
        int(pid), int(fields[1]), int(fields[3]), fields[0] in "ZX",
        (ticks[0] + ticks[1]) / _TICK, (ticks[2] + ticks[3]) / _TICK,
        int(fields[21]) * _PAGE, int(fields[19]),
    )  # fmt: skip


def read_table() -> dict[int, Stat]:
    """Every process on the host (a process gone between list and read is left out)."""
    table: dict[int, Stat] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                stat = parse_stat(f.read())
            if stat is not None:
                table[stat.pid] = stat
    return table


def tree(table: dict[int, Stat], leader: int) -> list[Stat]:
    """``leader`` (unreaped, so its pid and session id are its own), its descendants and
    the members of its session, once each."""
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found = {stat.pid for stat in table.values() if stat.session == leader}
    todo = [leader]
    while todo:
        pid = todo.pop()
        if pid in table:
            found.add(pid)
        todo.extend(c for c in children.get(pid, ()) if c not in found)
    return [table[pid] for pid in found]


# The scan under way, and when it started: runs that sample within half their interval of
# it share it (one /proc walk however many commands are sampled).
_scan: tuple[float, Future[dict[int, Stat]], Loop] | None = None


def _shared_scan(loop: Loop, max_age: float) -> Future[dict[int, Stat]]:
    global _scan
    now = time.monotonic()
    if _scan is not None and _scan[2] is loop and now - _scan[0] < max_age:
        return _scan[1]
    future = in_pool(read_table)
    _scan = (now, future, loop)
    return future


class _Samples(ABC, Generic[_R]):
    """When a run's next sample is due, the one in flight, and its hand-over to ``done``;
    what a sample reads (``_read``, in the pool) and makes of it (``_take``) is the
    subclass's. Owned by the run on its loop."""

    def __init__(self, limits: Limits, interval: float, first: float) -> None:
        self.limits = limits
        self.interval = interval
        self.next = first
        self.pending: Future[_R] | None = None

    def due(self) -> float | None:
        return None if self.pending is not None else self.next

    def start(self, loop: Loop, done: Callable[[KillReason | None], None]) -> None:
        """Begin a sample; ``done`` gets the limit crossed (or None) once it is in."""
        self.pending = future = self._read(loop)
        future.add_done_callback(lambda f: self._in(f, loop, done))

    @abstractmethod
    def _read(self, loop: Loop) -> Future[_R]:
        """Start one reading, in the pool."""

    @abstractmethod
    def _take(self, reading: _R) -> KillReason | None:
        """Take a reading in; the limit crossed, if any."""

    def _in(
        self,
        future: Future[_R],
        loop: Loop,
        done: Callable[[KillReason | None], None],
    ) -> None:
        if future is not self.pending:
            if not future.cancelled():
                future.exception()  # the run is over: nobody reads it, not even an error
            return
        self.pending = None
        self.next = loop.time() + self.interval
        if future.cancelled() or future.exception() is not None:
            done(None)  # unreadable this time: the next sample tries again
            return
        done(self._take(future.result()))

    def close(self) -> None:
        self.pending = None  # a reading in flight may finish: nobody reads it


class Sampler(_Samples[dict[int, Stat]]):
    """The /proc samples of one command's tree, and the limit it crossed."""

    def __init__(self, leader: int, limits: Limits, now: float) -> None:
        # With a limit, the first sample at once (a limit may already be crossed); without,
        # a command shorter than one interval is never scanned.
        interval = SAMPLE_INTERVAL if limits.any else ACCOUNT_INTERVAL
        super().__init__(limits, interval, now if limits.any else now + interval)
        self.leader = leader
        self.peak_memory = 0
        self.cpu = 0.0
        self.started = 0  # processes seen in the tree (those living under an interval missed)
        self.departed_cpu = 0.0  # CPU of tree processes gone without a tree parent to count it
        self.last: dict[tuple[int, int], Stat] = {}  # the tree of the previous sample

    def _read(self, loop: Loop) -> Future[dict[int, Stat]]:
        # Half an interval old at most: a sample a second of unlimited runs started at any
        # moment costs two scans a second at most, however many there are.
        return _shared_scan(loop, self.interval / 2)

    def _take(self, reading: dict[int, Stat]) -> KillReason | None:
        return self.add(tree(reading, self.leader))

    def add(self, procs: list[Stat]) -> KillReason | None:
        """Take one sample of the tree; the limit it crossed, if any."""
        now = {(p.pid, p.start): p for p in procs}
        alive = {p.pid for p in procs}
        for key, gone in self.last.items():
            # One reaped by a parent still in the tree is in that parent's reaped_cpu.
            if key not in now and gone.ppid not in alive:
                self.departed_cpu += gone.cpu + gone.reaped_cpu
        self.started += sum(1 for key in now if key not in self.last)
        self.last = now
        live = [p for p in procs if not p.zombie]
        memory = sum(p.rss for p in live)
        cpu = self.departed_cpu + sum(p.cpu + p.reaped_cpu for p in procs)
        self.peak_memory = max(self.peak_memory, memory)
        self.cpu = max(self.cpu, cpu)  # CPU only grows: a missed child must not shrink it
        return self.crossed(memory, len(live))

    def crossed(self, memory: int, alive: int) -> KillReason | None:
        limits = self.limits
        if limits.memory is not None and memory > limits.memory:
            return KillReason.MEMORY
        if limits.procs is not None and alive > limits.procs:
            return KillReason.PROCS
        if limits.cpu is not None and self.cpu > limits.cpu:
            return KillReason.CPU
        return None

    def usage(self) -> Usage:
        if not self.started:
            return Usage()
        return Usage(self.peak_memory, self.cpu, self.started)


class CgroupSampler(_Samples["Figures"]):  # a name only: jobcgroup imports this module
    """The samples of one limited command in its own cgroup (``jobcgroup.py``), the same
    interface as ``Sampler``'s. The kernel bounds memory and processes; a sample reads
    whether it had to (an OOM kill, a refused fork) and checks CPU against its limit."""

    def __init__(self, job: JobCgroup, limits: Limits, now: float) -> None:
        super().__init__(limits, SAMPLE_INTERVAL, now)
        self.job = job
        self.last: Figures | None = None  # the latest figures, the final ones at the end
        self.seen: set[int] = set()  # every member sampled: the processes it started

    def _read(self, loop: Loop) -> Future[Figures]:
        return in_pool(self.job.figures)

    def _take(self, reading: Figures) -> KillReason | None:
        return self.add(reading)

    def add(self, figures: Figures) -> KillReason | None:
        """Take one reading of the cgroup; the limit it crossed, if any."""
        self.last = figures
        self.seen.update(figures.members)
        return self.crossed()

    def crossed(self) -> KillReason | None:
        figures = self.last
        if figures is None:
            return None
        if figures.oom_kills:
            return KillReason.MEMORY  # the kernel killed one of its processes
        if figures.refused_forks:
            return KillReason.PROCS
        if self.limits.cpu is not None and figures.cpu_s > self.limits.cpu:
            return KillReason.CPU
        return None

    def bounded(self) -> KillReason | None:
        """What the kernel had to hold back, the run over: its OOM kill, a refused fork
        (CPU has no kernel bound: a command that ended past it was not stopped by it)."""
        crossed = self.crossed()
        return None if crossed is KillReason.CPU else crossed

    def finish(self, figures: Figures | None) -> None:
        """The final figures, read once every process of the cgroup is gone."""
        self.pending = None
        if figures is not None:
            self.add(figures)

    def usage(self) -> Usage:
        figures = self.last
        if figures is None:
            return Usage()
        return Usage(figures.peak_memory, figures.cpu_s, len(self.seen) or None)
