"""One measurement each: throughput workloads, memory per job, start-up time.

Every throughput figure comes with what the server process did during exactly the measured
interval: its CPU use, and its *demand* (running + waiting in the run queue, from
schedstat). Demand near 100 % means the server always had work queued, so the load
generator was not what limited it; on a shared machine the rest is CPU contention.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from server_loadgen import ProtocolError, open_connection, stats
from server_procs import RunningServer, ServerKind, machine_busy_seconds, start_server
from server_workers import CycleTask, DrainTask, PutTask, RunResult, Task, run_tasks

# Outstanding puts on the pipelined connection; beanstalkd reached 100 % CPU from ~1000.
PUT_WINDOW = 2000
# Reserves in flight per draining connection.
DRAIN_WINDOW = 64
DRAIN_CONNS = 4
# Connections per load-generator process for multi-client cycles (epoll in each process).
# On the shared 2-core machine, 4 processes x 4 clients kept both servers 95-100 % busy;
# 1 x 16 left beanstalkd idle 10-20 % of the time once other work competed for the CPUs.
# See `server.py --saturation`.
CYCLE_CONNS_PER_PROC = 4


@dataclass(frozen=True)
class Sample:
    """One measured figure and what the machine did meanwhile (fractions of one core)."""

    value: float
    ops: int
    seconds: float
    server_cpu: float  # CPU used by the server / wall time
    server_demand: float  # (running + waiting for a CPU) / wall time
    server_run_seconds: float  # the server's time on a CPU (schedstat: ns resolution)
    loadgen_cpu: float  # CPU used by all load-generator processes / wall time
    machine_busy: float  # all cores busy / wall time (others' load included)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class _Probe:
    """Samples the server and the machine at the start and end of a measured interval."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.t = [0.0, 0.0]
        self.cpu = [0.0, 0.0]
        self.sched = [(0.0, 0.0), (0.0, 0.0)]
        self.machine = [0.0, 0.0]

    def _mark(self, i: int) -> None:
        self.t[i] = time.monotonic()
        self.cpu[i] = self.server.cpu_seconds()
        self.sched[i] = self.server.sched_seconds()
        self.machine[i] = machine_busy_seconds()

    def start(self) -> None:
        self._mark(0)

    def end(self) -> None:
        self._mark(1)

    def sample(self, result: RunResult) -> Sample:
        wall = self.t[1] - self.t[0]
        (run0, wait0), (run1, wait1) = self.sched
        return Sample(
            value=result.rate,
            ops=result.ops,
            seconds=result.seconds,
            server_cpu=(self.cpu[1] - self.cpu[0]) / wall,
            server_demand=(run1 - run0 + wait1 - wait0) / wall,
            server_run_seconds=run1 - run0,
            loadgen_cpu=result.loadgen_cpu / wall,
            machine_busy=(self.machine[1] - self.machine[0]) / wall,
        )


def run_measured(server: RunningServer, tasks: Sequence[Task]) -> Sample:
    """Run ``tasks`` against ``server`` and sample the server over the measured interval."""
    probe = _Probe(server)
    result = run_tasks(tasks, probe.start, probe.end)
    server.check_alive()
    return probe.sample(result)


def current_jobs_ready(server: RunningServer, tube: str) -> int:
    """``current-jobs-ready`` of ``tube`` (0 when the tube does not exist)."""
    sock = open_connection(server.address, "bench-probe")
    try:
        try:
            return int(stats(sock, b"stats-tube %s\r\n" % tube.encode())["current-jobs-ready"])
        except ProtocolError as exc:
            if "NOT_FOUND" in str(exc):
                return 0
            raise
    finally:
        sock.close()


def pipelined_puts(server: RunningServer, tube: str, jobs: int, window: int = PUT_WINDOW) -> Sample:
    """``jobs`` pipelined puts on one connection into ``tube``."""
    return run_measured(server, [PutTask(server.address, tube, jobs, window)])


def drain(server: RunningServer, tube: str, jobs: int, conns: int = DRAIN_CONNS,
          window: int = DRAIN_WINDOW) -> Sample:
    """Reserve + delete the ``jobs`` ready jobs of ``tube`` with ``conns`` connections."""
    ready = current_jobs_ready(server, tube)
    if ready != jobs:
        raise ProtocolError(f"drain of {tube}: expected {jobs} ready jobs, found {ready}")
    quotas = [jobs // conns + (1 if i < jobs % conns else 0) for i in range(conns)]
    sample = run_measured(server, [DrainTask(server.address, tube, q, window) for q in quotas])
    left = current_jobs_ready(server, tube)
    if left:
        raise ProtocolError(f"drain of {tube}: {left} jobs still ready afterwards")
    return sample


def cycles(server: RunningServer, tube: str, conns: int, seconds: float,
           conns_per_proc: int = CYCLE_CONNS_PER_PROC) -> Sample:
    """``conns`` request/response clients doing put → reserve → delete for ``seconds``."""
    procs = max(1, -(-conns // conns_per_proc))
    shares = [conns // procs + (1 if i < conns % procs else 0) for i in range(procs)]
    return run_measured(server, [CycleTask(server.address, tube, n, seconds) for n in shares])


@dataclass(frozen=True)
class MemorySample:
    """Resident memory of a fresh server before and after storing ``jobs`` jobs."""

    jobs: int
    rss_before: int
    rss_after: int
    fill: Sample

    @property
    def per_job(self) -> float:
        return (self.rss_after - self.rss_before) / self.jobs

    def as_dict(self) -> dict[str, object]:
        return {
            "jobs": self.jobs, "rss_before": self.rss_before, "rss_after": self.rss_after,
            "per_job": self.per_job, "fill": self.fill.as_dict(),
        }


def memory_per_job(kind: ServerKind, jobs: int, extra: Sequence[str] = ()) -> MemorySample:
    """RSS growth per job of a fresh server storing ``jobs`` 32-byte jobs."""
    server = start_server(kind, extra)
    try:
        # One full round trip first, so lazily built state is in the "before" figure.
        if current_jobs_ready(server, "bench-mem") != 0:
            raise ProtocolError("fresh server already has jobs")
        before = server.rss_bytes()
        fill = pipelined_puts(server, "bench-mem", jobs, window=4000)
        stored = current_jobs_ready(server, "bench-mem")
        if stored != jobs:
            raise ProtocolError(f"memory fill: {stored} of {jobs} jobs stored")
        return MemorySample(jobs, before, server.rss_bytes(), fill)
    finally:
        server.stop()


@dataclass(frozen=True)
class StartupSample:
    """Start-up times (seconds) of one server kind: to first accept, or to first reply."""

    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def as_dict(self) -> dict[str, object]:
        return {"median": self.median, "min": min(self.runs), "max": max(self.runs),
                "runs": self.runs}
