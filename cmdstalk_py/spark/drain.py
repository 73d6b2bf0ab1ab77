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
Spark's environment. The driver waits at most ``connect_timeout`` seconds for the servers,
and so does each task; brokers are shared out over the tubes (of every server, with
several) by backlog (``drainplan``), and the driver prints each tube's progress from the
servers' stats (``drainwatch``).

Limits worth knowing:
- ``max_jobs`` is split evenly across the brokers (tasks cannot share one counter); a
  broker whose tube runs dry leaves its share unused.
- Brokers run concurrently only if the cluster has a task slot for each task; otherwise
  Spark runs the tasks in waves (the driver warns).
- Results reach the driver as they happen (``resultstream``) and are written to the event
  log at once, so a lost executor loses none; Spark runs its task again (counted in the
  summary), which drains more jobs, not old ones. The lost task's commands are killed
  with it (SIGHUP from pyspark's daemon, or a reparented worker), and the jobs they held
  go back to the queue when their connections close.
- Cancelling the drain kills the tasks: the jobs they held go back to the queue when their
  connections close; commands already running are not waited for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cmdstalk_py.client.names import format_address
from cmdstalk_py.loop.futures import current_task
from cmdstalk_py.ops.eventlog import encode_line, event_record
from cmdstalk_py.ops.logsetup import TextFormatter
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.spark.drainplan import BrokerSpec as BrokerSpec
from cmdstalk_py.spark.drainplan import broker_shares as broker_shares
from cmdstalk_py.spark.drainplan import plan_brokers as plan_brokers
from cmdstalk_py.spark.drainplan import plan_server_brokers
from cmdstalk_py.spark.drainwatch import DrainError, Watch, backlog, wait_for_servers
from cmdstalk_py.spark.resultstream import ResultServer, ResultStream, line_fields, log_text
from cmdstalk_py.supervisor.broker import Broker, new_switches
from cmdstalk_py.supervisor.brokerjob import Switches
from cmdstalk_py.supervisor.config import Config, parse_address
from cmdstalk_py.supervisor.results import JobResult
from cmdstalk_py.supervisor.standalone import serve_standalone

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The driver's logger for the brokers' warnings when drain() is given no ``say``.
log = logging.getLogger("cmdstalk.spark.drain")


@dataclass(frozen=True)
class TaskSetup:
    """What every task needs besides its brokers: where and with what environment the
    commands run, and how long to wait for the server."""

    cwd: str | None = None
    environ: Mapping[str, str] | None = None
    connect_timeout: float = 30.0
    results: str | None = None  # the driver's ResultServer, host:port
    token: str = ""


def command_config(config: Config, cwd: str | None) -> Config:
    """``config`` whose commands start in ``cwd``: ``env -C`` in front of the shell, so the
    broker's own process keeps its working directory (other tasks share it)."""
    if cwd is None:
        return config
    return dataclasses.replace(config, shell=("/usr/bin/env", "-C", cwd, *config.shell))


def run_task(config: Config, specs: list[BrokerSpec], idle_timeout: float, setup: TaskSetup) -> int:
    """Executor side: run ``specs``' brokers in threads until each is idle or done,
    streaming each result to the driver; the number of jobs handled."""
    from pyspark import TaskContext

    hostname = socket.gethostname()
    if setup.cwd is not None and not os.path.isdir(setup.cwd):
        raise DrainError(
            f"--cwd {setup.cwd} does not exist on executor host {hostname}: commands run "
            "there; give a directory every worker machine has"
        )
    servers = sorted({spec.server or config.address for spec in specs})
    wait_for_servers(servers, setup.connect_timeout, f" from executor host {hostname}")
    ctx = TaskContext.get()
    partition, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
    assert setup.results is not None
    stream = ResultStream(setup.results, setup.token, partition, attempt)
    sender = _Sender(stream, hostname)
    stop, kill_now = threading.Event(), threading.Event()
    previous = _die_with_the_executor(stop, kill_now)
    warnings = _Warnings(stream, named_servers=len(config.addresses) > 1)
    broker_log = logging.getLogger("cmdstalk")
    broker_log.addHandler(warnings)
    try:
        _run_brokers(config, specs, idle_timeout, setup, sender, stop, kill_now)
    finally:
        stop.set()  # ends the watchdog
        # Removed: a reused Python worker runs the next task with a stream of its own.
        broker_log.removeHandler(warnings)
        if previous is not None:  # a reused Python worker must die on SIGHUP again
            signal.signal(signal.SIGHUP, previous)
        stream.close()
    return sender.count


def _run_brokers(
    config: Config,
    specs: list[BrokerSpec],
    idle_timeout: float,
    setup: TaskSetup,
    sender: _Sender,
    stop: threading.Event,
    kill_now: threading.Event,
) -> None:
    run_config = command_config(config, setup.cwd)
    # The task's brokers share one event loop on this thread; kill-now also kills their
    # commands the way the executor's death must (the kill switch is the same one).
    switches = new_switches()
    switches = Switches(switches.stop, switches.kill_now, switches.kill_now)
    brokers: list[Broker] = []
    for spec in specs:
        address = parse_address(spec.server) if spec.server is not None else None
        broker = Broker(
            run_config, spec.tube, spec.slot, observer=sender, environ=setup.environ,
            switches=switches, address=address,
        )  # fmt: skip
        brokers.append(broker)
    limits = [spec.max_jobs for spec in specs]
    serve_standalone(brokers, stop, limits, idle_timeout, kill_now)


def _die_with_the_executor(stop: threading.Event, kill_now: threading.Event) -> Any:
    """Kill this task's commands when its executor goes: pyspark's daemon sends SIGHUP to
    its workers when the JVM closes its stdin; a worker whose parent died is reparented.
    A watcher thread acts on either until ``stop`` is set (also at the task's end).

    The SIGHUP handler only writes a byte to a pipe the watcher waits on: a handler that
    set the Events itself would take their lock, and a second SIGHUP arriving while the
    first one's ``set()`` held it deadlocked the task for good (its commands left as
    zombies, its job held until its TTR)."""
    wake_r, wake_w = _sighup_pipe()
    with contextlib.suppress(BlockingIOError):
        while os.read(wake_r, 4096):  # a SIGHUP from before this task is not for it
            pass

    def on_sighup(*_: object) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
            os.write(wake_w, b"\0")

    previous = None
    with contextlib.suppress(ValueError):  # not the main thread: the watchdog still works
        previous = signal.signal(signal.SIGHUP, on_sighup)
    parent = os.getppid()

    def watch() -> None:
        while not stop.is_set():
            readable, _, _ = select.select([wake_r], [], [], WATCH_INTERVAL)
            if readable or os.getppid() != parent:
                stop.set()
                kill_now.set()
                return

    threading.Thread(target=watch, name="executor-watch", daemon=True).start()
    return previous


#: How often the executor watcher looks for a new parent (and for ``stop``), seconds.
WATCH_INTERVAL = 0.5
_SIGHUP_PIPE: list[int] = []


def _sighup_pipe() -> tuple[int, int]:
    """The process's one SIGHUP pipe (read end, write end), made at first use and never
    closed: a handler may write to it at any moment, even after its task ended."""
    if not _SIGHUP_PIPE:
        _SIGHUP_PIPE.extend(os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC))
    return _SIGHUP_PIPE[0], _SIGHUP_PIPE[1]


class _Warnings(logging.Handler):
    """The brokers' warnings, sent to the driver in the supervisor's text format (UTC time,
    level, ``[tube:slot] job N``), the server in front when the drain has several. Without
    it Python prints a bare message on the executor's stderr: no job, tube or time."""

    def __init__(self, stream: ResultStream, named_servers: bool) -> None:
        super().__init__(logging.WARNING)
        self.stream = stream
        self.named_servers = named_servers
        self.setFormatter(TextFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            server = _server_of(_worker_name())
            if self.named_servers and server:
                text = f"{server} {text}"
            self.stream.send_log(text)
        except Exception:
            self.handleError(record)


def _worker_name() -> str:
    """The name of the broker's task logging now (``standalone`` names them), or ''."""
    try:
        task = current_task()
    except RuntimeError:  # no loop in this thread
        return ""
    return task.get_name() if task is not None else ""


def _server_of(name: str) -> str:
    """The server of a broker task named ``broker-SERVER/TUBE:SLOT`` ('' for another)."""
    if not name.startswith("broker-"):
        return ""
    return name[len("broker-") :].partition("/")[0]


class _Sender(Observer):
    """Sends each result to the driver the moment its broker finishes it."""

    def __init__(self, stream: ResultStream, hostname: str) -> None:
        self.stream = stream
        self.hostname = hostname
        self.count = 0

    def job_finished(self, result: JobResult) -> None:
        self.stream.send(encode_line(event_record(result, self.hostname, os.getpid())))
        self.count += 1


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
    rerun_tasks: int = 0
    per_server: Counter[str] = field(default_factory=Counter)

    def add(self, tube: str, outcome: str, exit_code: int | None, server: str = "") -> None:
        """Count one job's result."""
        self.jobs += 1
        self.per_server[server] += 1
        self.outcomes[(tube, outcome)] += 1
        if exit_code is not None:
            self.exit_codes[exit_code] += 1

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
        if len(self.per_server) > 1:
            out.append(
                "  servers: " + ", ".join(f"{s} {n}" for s, n in sorted(self.per_server.items()))
            )
        failing = {c: n for c, n in self.exit_codes.items() if c != 0}
        if failing:
            top = sorted(failing.items(), key=lambda item: (-item[1], item[0]))[:5]
            out.append("  failing exit codes: " + ", ".join(f"{c} ×{n}" for c, n in top))
        if self.rerun_tasks:
            out.append(
                f"  warning: {self.rerun_tasks} Spark task(s) were lost (an executor died) "
                "and run again: every job they finished is counted and in the event log; "
                "jobs they held went back to the queue"
            )
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
    """Run ``parallelism`` Spark tasks of brokers over ``config.tubes`` on every server of
    ``config.addresses``; append every job's event line to ``events_path`` (when given) and
    return the summary. ``DrainError`` naming the servers that stay unreachable for
    ``setup.connect_timeout`` seconds."""
    setup = setup or TaskSetup()
    servers = tuple(format_address(host, port) for host, port in config.addresses)
    wait_for_servers(servers, setup.connect_timeout)
    plan = _plan(servers, config.tubes, parallelism, max_jobs)
    slots = spark.sparkContext.defaultParallelism
    if say is not None and len(plan) > slots:
        say(f"warning: {len(plan)} tasks but {slots} task slots: brokers will run in waves")
    summary = DrainSummary(tasks=len(plan), brokers=sum(len(t) for t in plan))
    path = Path(events_path) if events_path is not None else None
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(path, "ab")) if path is not None else None

        def on_line(line: bytes) -> None:
            message = log_text(line)
            if message is not None:
                if say is not None:
                    say(message)
                else:
                    log.warning("%s", message)
                return
            summary.add(*line_fields(line))
            if sink is not None:
                sink.write(line)
                sink.flush()  # on disk as it happens: a crash of the driver loses nothing

        server = stack.enter_context(ResultServer(_driver_host(spark), on_line))
        task_setup = dataclasses.replace(setup, results=server.address, token=server.token)
        rdd = spark.sparkContext.parallelize(plan, len(plan)).map(
            lambda specs: run_task(config, specs, idle_timeout, task_setup)
        )
        if say is not None:
            say(f"running {summary.brokers} brokers in {len(plan)} tasks on {config.tubes}")
        with Watch(servers, config.tubes, say or (lambda line: None)):
            rdd.count()
        server.close()  # every connection read to its end
        summary.rerun_tasks = sum(n - 1 for n in server.attempts.values())
    summary.seconds = time.monotonic() - started
    summary.events_path = path
    return summary


def _plan(
    servers: tuple[str, ...], tubes: tuple[str, ...], parallelism: int, max_jobs: int | None
) -> list[list[BrokerSpec]]:
    """The brokers of each task, weighed by the backlog each server has now."""
    if len(servers) == 1:
        return plan_brokers(tubes, parallelism, max_jobs, backlog(servers[0], tubes))
    weights = {(s, t): n for s in servers for t, n in backlog(s, tubes).items()}
    return plan_server_brokers(servers, tubes, parallelism, max_jobs, weights)


def _driver_host(spark: SparkSession) -> str:
    """The address executors reach the driver at (loopback in local mode)."""
    if str(spark.sparkContext.master).startswith("local"):
        return "127.0.0.1"
    return str(spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1"))
