"""Drain tubes on Spark: brokers run as Spark tasks, results come back as event-log rows.

Each Spark task runs one or more ``cmdstalk_py.supervisor.broker.Broker`` threads, the very code the
``cmdstalk`` supervisor runs, so reservation, the command's environment, TTR kills,
backoff and bury rules are exactly the supervisor's. A broker stops when its tube has had
no job for ``idle_timeout`` seconds, or when it has handled its share of ``max_jobs``.
Every ``JobResult`` becomes one event-log line (``cmdstalk_py.ops.eventlog.event_record``, with
the executor's hostname and the Python worker's pid), and the driver appends them all to
one JSON-lines file: the same schema ``cmdstalk --events`` writes and ``report`` reads.

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
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cmdstalk_py.ops.eventlog import encode_line, event_record
from cmdstalk_py.ops.observers import Observer
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


def plan_brokers(
    tubes: tuple[str, ...], parallelism: int, max_jobs: int | None
) -> list[list[BrokerSpec]]:
    """Brokers per task. ``max(parallelism, len(tubes))`` brokers are dealt round-robin over
    the tubes (so every tube gets one) and over ``parallelism`` tasks; ``max_jobs`` is split
    evenly (brokers whose share is 0 are left out)."""
    if parallelism < 1 or not tubes:
        raise ValueError("need at least one tube and a parallelism of at least 1")
    count = max(parallelism, len(tubes))
    tasks: list[list[BrokerSpec]] = [[] for _ in range(parallelism)]
    for k in range(count):
        share = None
        if max_jobs is not None:
            share = max_jobs // count + (1 if k < max_jobs % count else 0)
            if share == 0:
                continue
        spec = BrokerSpec(tubes[k % len(tubes)], k // len(tubes), share)
        tasks[k % parallelism].append(spec)
    return [t for t in tasks if t]


class _Collector(Observer):
    """Keeps every result; list.append is atomic, so broker threads need no lock."""

    def __init__(self) -> None:
        self.results: list[JobResult] = []

    def job_finished(self, result: JobResult) -> None:
        self.results.append(result)


def run_task(config: Config, specs: list[BrokerSpec], idle_timeout: float) -> list[ResultRow]:
    """Executor side: run ``specs``' brokers in threads until each is idle or done."""
    collector = _Collector()
    stop = threading.Event()
    threads = []
    for spec in specs:
        broker = Broker(config, spec.tube, spec.slot, observer=collector)
        thread = threading.Thread(
            target=broker.run,
            args=(stop, spec.max_jobs, idle_timeout),
            name=f"broker-{spec.tube}:{spec.slot}",
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    hostname, pid = socket.gethostname(), os.getpid()
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
) -> DrainSummary:
    """Run ``parallelism`` Spark tasks of brokers over ``config.tubes``; append every job's
    event line to ``events_path`` (when given) and return the summary."""
    from pyspark import StorageLevel

    plan = plan_brokers(config.tubes, parallelism, max_jobs)
    slots = spark.sparkContext.defaultParallelism
    if say is not None and len(plan) > slots:
        say(f"warning: {len(plan)} tasks but {slots} task slots: brokers will run in waves")
    started = time.monotonic()
    rdd = (
        spark.sparkContext.parallelize(plan, len(plan))
        .flatMap(lambda specs: run_task(config, specs, idle_timeout))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    summary = DrainSummary(tasks=len(plan), brokers=sum(len(t) for t in plan))
    try:
        if say is not None:
            say(f"running {summary.brokers} brokers in {len(plan)} tasks on {config.tubes}")
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
