"""Drain tubes on Spark: brokers run as Spark tasks, results come back as event-log rows.

Each Spark task runs one or more ``cmdstalk_py.supervisor.broker.Broker`` threads, the very code the
``cmdstalk`` supervisor runs, so reservation, the command's environment, TTR kills,
backoff and bury rules are exactly the supervisor's. A broker stops when its tube has had
no job for ``idle_timeout`` seconds, or when it has handled its share of ``max_jobs``.
Every ``JobResult`` becomes one event-log line (``cmdstalk_py.ops.eventlog.event_record``, with
the executor's hostname and the Python worker's pid), and the driver appends them all to
one JSON-lines file: the same schema ``cmdstalk --events`` writes and ``report`` reads.

Commands run in ``TaskSetup.cwd`` (the CLI's ``--cwd``, by default the driver's working
directory; a task fails clearly where it does not exist) with ``TaskSetup.environ`` (the
driver's environment) plus ``CMDSTALK_*``, not in the executor's work directory with
Spark's environment. The driver waits at most ``connect_timeout`` seconds for the server,
and so does each task; brokers are shared out over the tubes by backlog
(``plan_brokers``), and the driver prints each tube's progress from the server's stats
(``drainwatch``).

Limits worth knowing:
- ``max_jobs`` is split evenly across the brokers (tasks cannot share one counter); a
  broker whose tube runs dry leaves its share unused.
- Brokers run concurrently only if the cluster has a task slot for each task; otherwise
  Spark runs the tasks in waves (the driver warns).
- Results are persisted by Spark until the driver has written them; if an executor is lost
  before that, Spark would rerun its task, which would drain more jobs, not repeat old ones.
- Cancelling the drain kills the tasks: the jobs they held go back to the queue when their
  connections close; commands already running are not waited for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cmdstalk_py.ops.eventlog import encode_line, event_record
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.spark.drainwatch import DrainError, Watch, backlog, wait_for_server
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.results import JobResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# One row per finished job: (tube, outcome, exit_code, event-log line).
ResultRow = tuple[str, str, int | None, bytes]


@dataclass(frozen=True)
class BrokerSpec:
    """One broker a task runs: tube, slot within the tube, and its share of --max-jobs."""

    tube: str
    slot: int
    max_jobs: int | None


def broker_shares(
    tubes: tuple[str, ...], parallelism: int, backlog: Mapping[str, int]
) -> dict[str, int]:
    """Brokers per tube: ``parallelism`` shared out in proportion to each tube's backlog
    (largest remainders first), and at least one for every tube."""
    total = sum(max(0, backlog.get(t, 0)) for t in tubes)
    if total == 0:  # nothing to weigh by: as evenly as possible
        count = max(parallelism, len(tubes))
        return {
            t: count // len(tubes) + (1 if i < count % len(tubes) else 0)
            for i, t in enumerate(tubes)
        }
    exact = {t: parallelism * max(0, backlog.get(t, 0)) / total for t in tubes}
    shares = {t: int(v) for t, v in exact.items()}
    by_remainder = sorted(tubes, key=lambda t: exact[t] - shares[t], reverse=True)
    for t in by_remainder[: parallelism - sum(shares.values())]:
        shares[t] += 1
    return {t: max(1, n) for t, n in shares.items()}


def plan_brokers(
    tubes: tuple[str, ...],
    parallelism: int,
    max_jobs: int | None,
    backlog: Mapping[str, int] | None = None,
) -> list[list[BrokerSpec]]:
    """Brokers per task, ``parallelism`` tasks at most.

    Without ``backlog``: ``max(parallelism, len(tubes))`` brokers dealt round-robin over the
    tubes and the tasks. With it: :func:`broker_shares` brokers per tube, so the biggest
    tube gets the most, each placed in the task with the least backlog per broker so far.
    ``max_jobs`` is split evenly (brokers whose share is 0 are left out).
    """
    if parallelism < 1 or not tubes:
        raise ValueError("need at least one tube and a parallelism of at least 1")
    shares: dict[str, int] = {}
    if backlog is None:
        count = max(parallelism, len(tubes))
        order = [(tubes[k % len(tubes)], k // len(tubes)) for k in range(count)]
    else:
        shares = broker_shares(tubes, parallelism, backlog)
        order = [(t, slot) for t in tubes for slot in range(shares[t])]
    tasks: list[list[BrokerSpec]] = [[] for _ in range(parallelism)]
    load = [0.0] * parallelism
    for k, (tube, slot) in enumerate(order):
        share = None
        if max_jobs is not None:
            share = max_jobs // len(order) + (1 if k < max_jobs % len(order) else 0)
            if share == 0:
                continue
        if backlog is None:
            target = k % parallelism
        else:
            target = min(range(parallelism), key=lambda i: (load[i], len(tasks[i])))
            load[target] += backlog.get(tube, 0) / shares[tube]
        tasks[target].append(BrokerSpec(tube, slot, share))
    return [t for t in tasks if t]


class _Collector(Observer):
    """Keeps every result; list.append is atomic, so broker threads need no lock."""

    def __init__(self) -> None:
        self.results: list[JobResult] = []

    def job_finished(self, result: JobResult) -> None:
        self.results.append(result)


@dataclass(frozen=True)
class TaskSetup:
    """What every task needs besides its brokers: where and with what environment the
    commands run, and how long to wait for the server."""

    cwd: str | None = None
    environ: Mapping[str, str] | None = None
    connect_timeout: float = 30.0


def command_config(config: Config, cwd: str | None) -> Config:
    """``config`` whose commands start in ``cwd``: ``env -C`` in front of the shell, so the
    broker's own process keeps its working directory (other tasks share it)."""
    if cwd is None:
        return config
    return dataclasses.replace(config, shell=("/usr/bin/env", "-C", cwd, *config.shell))


def run_task(
    config: Config, specs: list[BrokerSpec], idle_timeout: float, setup: TaskSetup
) -> list[ResultRow]:
    """Executor side: run ``specs``' brokers in threads until each is idle or done."""
    hostname, pid = socket.gethostname(), os.getpid()
    if setup.cwd is not None and not os.path.isdir(setup.cwd):
        raise DrainError(
            f"--cwd {setup.cwd} does not exist on executor host {hostname}: commands run "
            "there; give a directory every worker machine has"
        )
    address = f"{config.host}:{config.port}"
    wait_for_server(address, setup.connect_timeout, f" from executor host {hostname}")
    collector = _Collector()
    stop = threading.Event()
    threads = []
    run_config = command_config(config, setup.cwd)
    for spec in specs:
        broker = Broker(run_config, spec.tube, spec.slot, observer=collector, environ=setup.environ)
        thread = threading.Thread(
            target=broker.run,
            args=(stop, spec.max_jobs, idle_timeout),
            name=f"broker-{spec.tube}:{spec.slot}",
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return [
        (r.tube, r.outcome.value, r.exit_code, encode_line(event_record(r, hostname, pid)))
        for r in collector.results
    ]


@dataclass
class DrainSummary:
    """What a drain did: jobs per (tube, outcome), failing exit codes, time taken."""

    jobs: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    exit_codes: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0
    events_path: Path | None = None
    tasks: int = 0
    brokers: int = 0

    def lines(self) -> list[str]:
        """The summary as text lines for the terminal."""
        rate = self.jobs / self.seconds if self.seconds > 0 else 0.0
        out = [
            f"{self.jobs} jobs in {self.seconds:.1f}s ({rate:,.1f} jobs/s) by {self.brokers} "
            f"brokers in {self.tasks} Spark tasks"
        ]
        for tube in sorted({t for t, _ in self.outcomes}):
            parts = [f"{o} {n}" for (t, o), n in sorted(self.outcomes.items()) if t == tube]
            out.append(f"  {tube}: " + ", ".join(parts))
        failing = {c: n for c, n in self.exit_codes.items() if c != 0}
        if failing:
            top = sorted(failing.items(), key=lambda item: (-item[1], item[0]))[:5]
            out.append("  failing exit codes: " + ", ".join(f"{c} ×{n}" for c, n in top))
        if self.events_path is not None:
            out.append(f"  events: {self.events_path}")
        return out


def drain(
    spark: SparkSession,
    config: Config,
    parallelism: int,
    *,
    max_jobs: int | None = None,
    idle_timeout: float = 3.0,
    events_path: str | Path | None = None,
    say: Callable[[str], None] | None = None,
    setup: TaskSetup | None = None,
) -> DrainSummary:
    """Run ``parallelism`` Spark tasks of brokers over ``config.tubes``; append every job's
    event line to ``events_path`` (when given) and return the summary. ``DrainError`` if
    the server stays unreachable for ``setup.connect_timeout`` seconds."""
    from pyspark import StorageLevel

    setup = setup or TaskSetup()
    address = f"{config.host}:{config.port}"
    wait_for_server(address, setup.connect_timeout)
    plan = plan_brokers(config.tubes, parallelism, max_jobs, backlog(address, config.tubes))
    slots = spark.sparkContext.defaultParallelism
    if say is not None and len(plan) > slots:
        say(f"warning: {len(plan)} tasks but {slots} task slots: brokers will run in waves")
    started = time.monotonic()
    rdd = (
        spark.sparkContext.parallelize(plan, len(plan))
        .flatMap(lambda specs: run_task(config, specs, idle_timeout, setup))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    summary = DrainSummary(tasks=len(plan), brokers=sum(len(t) for t in plan))
    try:
        if say is not None:
            say(f"running {summary.brokers} brokers in {len(plan)} tasks on {config.tubes}")
        with Watch(address, config.tubes, say or (lambda line: None)):
            rdd.count()  # all tasks at once; reading back below does not run them again
        summary.seconds = time.monotonic() - started
        path = Path(events_path) if events_path is not None else None
        with contextlib.ExitStack() as stack:
            sink = stack.enter_context(open(path, "ab")) if path is not None else None
            for tube, outcome, exit_code, line in rdd.toLocalIterator():
                summary.jobs += 1
                summary.outcomes[(tube, outcome)] += 1
                if exit_code is not None:
                    summary.exit_codes[exit_code] += 1
                if sink is not None:
                    sink.write(line)
        summary.events_path = path
    finally:
        rdd.unpersist()
    return summary
