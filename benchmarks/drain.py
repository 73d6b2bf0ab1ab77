"""Drain benchmark (issue 4): how fast cmdstalk turns queued jobs into finished processes.

2000 jobs in one tube on the real beanstalkd, command ``cat >/dev/null`` run by
``/bin/bash -c`` (as Go cmdstalk does), per-tube 1 and 4: jobs/s until every job is deleted
(stats-tube is polled). Against the raw spawn limit measured in the same run: the same
command started sequentially from Python with the payload on stdin via ``subprocess.run``,
no queue. Targets: per-tube 1 ≥ 0.90 x raw, per-tube 4 ≥ 1.4 x raw.

Workers measured (``--modes``):
- ``cli``: the real ``cmdstalk`` CLI as a subprocess (the figure that counts);
- ``broker``: the supervisor's ``Broker`` class on one event loop in this process (not by
  default: it tells the broker's cost apart from the CLI process's);
- ``loop``: a minimal reserve / stats-job / run_command / delete loop per thread inside
  this process (what a broker costs without the CLI around it);
- ``spawn``: ``run_command`` in a plain loop, no queue (our process layer alone);
- ``go``: Go cmdstalk with the same command and worker count, built as ``idle.py`` builds
  it (``--go-cmdstalk PATH`` / ``CMDSTALK_GO_BIN``, or from the snapshots under
  ``--go-sources``; skipped with the reason without either): the reference for the
  supervisor's CPU per job (issue 26: ours ≤ Go's at 1 and 4 workers).

Two figures per worker kind and per-tube count:
- drain: the issue's measure. All jobs are put while the tube is paused, the workers start
  and must be watching, the tube is unpaused and the clock runs until stats-tube counts
  every job deleted. Its ratio is to the median raw rate of the run.
- paired: the same number of jobs fed in batches (pipelined puts, workers already
  running), each batch alternating with a batch of raw ``subprocess.run`` calls. The
  machine is shared and its load drifts within seconds; the paired ratio compares the two
  under the same load, so it is the one to trust when the figures jump around. A batch
  has fixed costs the drain pays once: its puts compete with the workers, the workers
  wake from an idle reserve, the poll sees the end late.
  At 50 jobs per batch they cost the queue side ~1.5 % (0.90 × raw against 0.91-0.92 at
  200, alternating runs in one session); at 200 (the default, ~0.5 s a batch at per-tube
  1) about a quarter of that, and a pair still spans about a second.

Both find their end by polling stats-tube, sparingly (``next_poll``): each poll wakes
beanstalkd and this process on the vCPU the measured chain mostly shares. A paired batch of
200 takes ~20 polls (sleeps doubling from the start, then shrinking towards the end, the
last few jobs watched every millisecond), a drain of 2000 about as many; polling every
millisecond after 70 % of the previous batch's time, as in the fifth session, took ~150.

For the CLI the drain runs also print its CPU time per job (every thread, from
``/proc/PID/task/*/schedstat``) next to the raw loop's own (``thread_time``): on this
machine the chain of processes mostly shares one vCPU, so per-job CPU is what moves the
ratio, and it is far steadier than the rates from run to run.

``--workers N[,N...]`` adds, per N and round, the issue-18 comparison in one run: the CLI
with ``--workers N`` (shared workers) and with ``--per-tube N``, against the raw spawn
N-way parallel (N threads, each running the command with ``subprocess.run`` in a loop, no
queue): each drains the jobs (raw measured right before), then runs paired batches
against raw N-way batches (``cli-workers/N paired``: the figure to trust on a loaded
machine). Rounds alternate which flag goes first.

``--profile`` runs one in-process loop worker under cProfile; ``--profile-cli N`` runs the
CLI with ``--per-tube N`` (``--workers N`` with ``--profile-workers``) with every thread
under cProfile. Both print the top entries.

Usage: ``python benchmarks/drain.py [--quick] [--jobs N] [--repeat R] [--modes cli,loop]
[--cli-arg=--log-level=warning]``
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path

import greenstalk

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from idle import go_cmdstalk  # noqa: E402

from cmdstalk_py.loop.core import Loop  # noqa: E402
from cmdstalk_py.loop.tools import run  # noqa: E402
from cmdstalk_py.process import run_command  # noqa: E402
from tests.helpers import BeanstalkServer, running_beanstalkd, wait_until  # noqa: E402

SHELL = ["/bin/bash", "-c"]
CMD = "cat >/dev/null"
ARGV = [*SHELL, CMD]
PAYLOAD = b'{"job": "drain benchmark", "pad": "' + b"x" * 40 + b'"}'
TTR = 120
UNPAUSE_AFTER = 1  # seconds the tube stays paused once workers watch (pause-tube unit)
DRAIN_POLL = 0.01  # shortest gap between stats-tube polls in a full drain (next_poll)
BATCH_POLL = 0.001  # the same in a paired batch: batches are short
WARMUP_JOBS = 20
CLI_EXTRA_ARGS: list[str] = []  # --cli-arg, for experiments (e.g. --log-level=warning)

#: Seconds of CPU the workers have used so far (all their threads), when they are a process.
CpuProbe = Callable[[], float]
Workers = Callable[[BeanstalkServer, str, int], AbstractContextManager[CpuProbe | None]]


def child_env() -> dict[str, str]:
    """What the supervisor gives a job's command: its own environment plus CMDSTALK_*.

    Every mode uses it, raw included: the environment changes the command's own cost
    (``LANG`` makes bash and cat load a locale), so all modes must pay the same.
    """
    return {
        **os.environ,
        "CMDSTALK_JOB_ID": "1",
        "CMDSTALK_TUBE": "bench",
        "CMDSTALK_PRIORITY": "1024",
        "CMDSTALK_TTR": str(TTR),
        "CMDSTALK_RELEASES": "0",
        "CMDSTALK_TIMEOUTS": "0",
        "CMDSTALK_RESERVES": "1",
        "CMDSTALK_AGE": "0",
    }


# -- without a queue ------------------------------------------------------------------------


#: CPU seconds per job of the raw loop (this process's own, not the commands'), per run.
RAW_CPU: list[float] = []


def time_raw(jobs: int) -> float:
    """Seconds for ``jobs`` sequential ``subprocess.run`` calls, payload on stdin."""
    env = child_env()
    cpu = time.thread_time()
    started = time.perf_counter()
    for _ in range(jobs):
        subprocess.run(ARGV, input=PAYLOAD, env=env, check=True)
    elapsed = time.perf_counter() - started
    RAW_CPU.append((time.thread_time() - cpu) / jobs)
    return elapsed


def time_raw_parallel(jobs: int, threads: int) -> float:
    """Seconds for ``jobs`` ``subprocess.run`` calls shared by ``threads`` threads."""
    env = child_env()
    shares = [jobs // threads + (i < jobs % threads) for i in range(threads)]

    def share(count: int) -> None:
        for _ in range(count):
            subprocess.run(ARGV, input=PAYLOAD, env=env, check=True)

    pool = [threading.Thread(target=share, args=(n,)) for n in shares]
    started = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return time.perf_counter() - started


def process_cpu(pid: int) -> float:
    """CPU seconds used so far by every thread of ``pid`` (scheduler nanoseconds, not ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that just ended
            continue
    return total / 1e9


def time_spawn(jobs: int) -> float:
    """Seconds for ``jobs`` sequential ``run_command`` calls."""
    env = child_env()

    async def sequential() -> None:
        for _ in range(jobs):
            result = await run_command(ARGV, PAYLOAD, env)
            if result.exit_code != 0:
                raise RuntimeError(f"command failed: {result}")

    started = time.perf_counter()
    run(sequential())
    return time.perf_counter() - started


# -- workers ----------------------------------------------------------------------------------


def loop_worker(server: BeanstalkServer, tube: str, stop: threading.Event) -> None:
    """A minimal broker: reserve, stats-job, run_command (on this thread's own loop), delete."""
    env = child_env()
    address = (server.host, server.port)
    loop = Loop()
    with greenstalk.Client(address, use=tube, watch=tube, encoding=None) as client:
        while not stop.is_set():
            try:
                job = client.reserve(timeout=1)
            except greenstalk.TimedOutError:
                continue
            client.stats_job(job)  # the supervisor does one per job
            assert isinstance(job.body, bytes)
            result = loop.run_until_complete(run_command(ARGV, job.body, env))
            if result.exit_code != 0:
                raise RuntimeError(f"command failed: {result}")
            client.delete(job)
    loop.close()


@contextmanager
def running(targets: list[Callable[[], object]], stop: threading.Event) -> Iterator[None]:
    """Each of ``targets`` in a thread of its own until the block ends, then ``stop``."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


@contextmanager
def loop_workers(server: BeanstalkServer, tube: str, count: int) -> Iterator[CpuProbe | None]:
    """``count`` in-process loop workers on ``tube`` until the block ends."""
    stop = threading.Event()
    with running([lambda: loop_worker(server, tube, stop) for _ in range(count)], stop):
        yield None


@contextmanager
def broker_workers(
    server: BeanstalkServer, tube: str, count: int
) -> Iterator[CpuProbe | None]:
    """The supervisor's own ``Broker`` class, ``count`` of them on one event loop in a
    thread of this process.

    Tells the cost of the broker apart from that of the CLI process around it.
    """
    from cmdstalk_py.supervisor.broker import Broker
    from cmdstalk_py.supervisor.config import Config
    from cmdstalk_py.supervisor.standalone import serve_standalone

    config = Config(cmd=CMD, host=server.host, port=server.port, tubes=(tube,))
    stop = threading.Event()
    brokers = [Broker(config, tube, slot) for slot in range(count)]
    with running([partial(serve_standalone, brokers, stop)], stop):
        yield None


def cli_argv(profile_to: Path | None = None) -> list[str]:
    """The cmdstalk CLI; with ``profile_to``, every thread of it runs under cProfile."""
    if profile_to is None:
        return [sys.executable, "-c", "from cmdstalk_py.supervisor.cli import main; main()"]
    return [sys.executable, "-c", _PROFILED_CLI.format(path=str(profile_to))]


# Brokers are threads, which cProfile does not follow: give each thread its own profiler
# and merge them all when the CLI exits.
_PROFILED_CLI = """
import atexit, cProfile, pstats, threading
profilers = [cProfile.Profile()]
thread_run = threading.Thread.run
def run(self):
    profiler = cProfile.Profile()
    profilers.append(profiler)
    profiler.enable()
    try:
        thread_run(self)
    finally:
        profiler.disable()
threading.Thread.run = run
def dump():
    profilers[0].disable()
    stats = pstats.Stats(profilers[0])
    for profiler in profilers[1:]:
        stats.add(profiler)
    stats.dump_stats({path!r})
atexit.register(dump)
profilers[0].enable()
from cmdstalk_py.supervisor.cli import main
main()
"""


def cli_available() -> bool:
    """True once the supervisor CLI accepts the options this benchmark uses."""
    try:
        out = subprocess.run([*cli_argv(), "--help"], capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return False
    text = out.stdout.decode(errors="replace")
    return out.returncode == 0 and "--per-tube" in text and "--cmd" in text


@contextmanager
def cli_workers(
    server: BeanstalkServer,
    tube: str,
    per_tube: int,
    profile_to: Path | None = None,
    flag: str = "--per-tube",
) -> Iterator[CpuProbe | None]:
    """The real CLI serving ``tube`` with ``per_tube`` brokers (``flag="--workers"``:
    shared workers) until the block ends; yields a probe of the CLI's CPU time."""
    argv = [*cli_argv(profile_to), "--address", server.address, "--tubes", tube]
    argv += [flag, str(per_tube), "--cmd", CMD, *CLI_EXTRA_ARGS]
    # Default log level: a user's cmdstalk logs every job, so the benchmark does too.
    with serving(argv, {**os.environ, "PYTHONPATH": str(ROOT)}) as probe:
        yield probe


@contextmanager
def serving(argv: list[str], env: dict[str, str] | None = None) -> Iterator[CpuProbe]:
    """A supervisor process running ``argv`` until the block ends (then TERM, then KILL);
    yields a probe of its CPU time."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield partial(process_cpu, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: Go cmdstalk's binary for the ``go`` mode (set in ``main``).
GO_BIN: list[str] = []


@contextmanager
def go_workers(server: BeanstalkServer, tube: str, per_tube: int) -> Iterator[CpuProbe | None]:
    """Go cmdstalk serving ``tube`` with ``per_tube`` workers (its own flags: the same
    ``/bin/bash -c`` command), as ``cli_workers`` runs ours: the reference for the CPU
    per job."""
    argv = [GO_BIN[0], f"-address={server.address}", f"-tubes={tube}",
            f"-per-tube={per_tube}", f"-cmd={CMD}"]  # fmt: skip
    with serving(argv) as probe:
        yield probe


# -- the queue side -----------------------------------------------------------------------


#: Of the time the jobs left should take, the share slept before the next poll: under half,
#: so a rate that doubles between polls is still not overshot.
POLL_SHARE = 0.4
#: Jobs that must have been seen done before their rate is trusted. A rate from one job is
#: anything: the first job of a drain, seen 10 ms after the unpause, once made the wait
#: sleep 4 s past a 3 s drain (reported as ~240 jobs/s instead of ~330).
RATE_JOBS = 10


def next_poll(left: int, per_job: float | None, poll: float, watched: float) -> float:
    """Seconds to sleep before polling again for ``left`` jobs at ``per_job`` s each.

    ``POLL_SHARE`` of their expected time, never less than ``poll``: ~log(jobs) polls, then
    one every ``poll`` (or ``POLL_SHARE`` of a job's time) for the last few, so the end is
    seen at most that late. Never more than ``watched``, the seconds the rate was measured
    over (or the jobs waited for so far): a sleep at most doubles what has been seen, so a
    wrong rate costs a few polls more, not a late end.
    """
    if per_job is None:
        return poll
    return max(poll, min(POLL_SHARE * left * per_job, watched))


class EndWatch:
    """``wait_deleted``'s arithmetic, without the clock or the server: when to poll next
    for ``count`` jobs, given each poll's time and the jobs done by then.

    ``per_job``: seconds a job is expected to take, until the jobs seen done tell
    (``RATE_JOBS`` of them, counted from the poll before the first that saw one).
    """

    def __init__(
        self, count: int, poll: float, per_job: float | None, now: float, done: int
    ) -> None:
        self.count, self.poll, self.per_job = count, poll, per_job
        self.last_at, self.last_done = now, done
        self.since_at, self.since_done = now, done
        self.progress = False

    @property
    def finished(self) -> bool:
        return self.last_done >= self.count

    def sleep(self) -> float:
        left = self.count - self.last_done
        return next_poll(left, self.per_job, self.poll, self.last_at - self.since_at)

    def seen(self, now: float, done: int) -> None:
        if done > self.last_done and not self.progress:
            self.progress = True
            self.since_at, self.since_done = self.last_at, self.last_done
        if done - self.since_done >= RATE_JOBS:
            self.per_job = (now - self.since_at) / (done - self.since_done)
        self.last_at, self.last_done = now, done


class Queue:
    """One fresh tube: puts (pipelined on a raw socket) and stats-tube polling."""

    _counter = 0

    def __init__(self, server: BeanstalkServer) -> None:
        Queue._counter += 1
        self.tube = f"drain{os.getpid()}-{Queue._counter}"  # fresh: counters start at 0
        self.client: greenstalk.Client[bytes] = greenstalk.Client(
            (server.host, server.port), use=self.tube, watch=self.tube, encoding=None
        )
        self.sock = socket.create_connection((server.host, server.port), timeout=30)
        self.sock.sendall(b"use %s\r\n" % self.tube.encode())
        self._expect(1, b"USING")
        self.put_total = 0

    def _expect(self, count: int, word: bytes) -> None:
        data = b""
        while data.count(b"\r\n") < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("beanstalkd closed the connection")
            data += chunk
        if any(not line.startswith(word) for line in data.split(b"\r\n")[:count]):
            raise RuntimeError(f"unexpected reply: {data[:200]!r}")

    def put(self, jobs: int) -> None:
        """Put ``jobs`` jobs in one write, then read the replies."""
        cmd = b"put 1024 0 %d %d\r\n%s\r\n" % (TTR, len(PAYLOAD), PAYLOAD)
        self.sock.sendall(cmd * jobs)
        self._expect(jobs, b"INSERTED")
        self.put_total += jobs

    def stats(self) -> greenstalk.StatsTube:
        return self.client.stats_tube(self.tube)

    def deleted(self) -> int:
        return int(self.stats()["cmd-delete"])

    def wait_watchers(self, workers: int) -> None:
        wait_until(
            lambda: int(self.stats()["current-watching"]) >= workers + 1,  # +1: our client
            timeout=60,
            message=f"{workers} workers watching {self.tube}",
        )

    def wait_deleted(
        self, count: int, poll: float, per_job: float | None = None, timeout: float = 600
    ) -> None:
        """Return once ``count`` jobs of the tube are deleted (seen late by ~``poll``).

        Polls sparingly (see ``next_poll``): a stats-tube costs beanstalkd and this process
        CPU taken from the chain being measured, which mostly shares one vCPU here.
        ``per_job``: seconds a job is expected to take, until progress tells.
        """
        deadline = time.perf_counter() + timeout
        watch = EndWatch(count, poll, per_job, time.perf_counter(), self.deleted())
        while not watch.finished:
            if watch.last_at > deadline:
                raise RuntimeError(f"{self.tube} not drained: {self.stats()}")
            time.sleep(watch.sleep())
            watch.seen(time.perf_counter(), self.deleted())

    def check_all_deleted(self) -> None:
        stats = self.stats()
        if stats["cmd-delete"] != self.put_total or stats["current-jobs-buried"]:
            raise RuntimeError(f"jobs were not all deleted: {stats}")

    def close(self) -> None:
        self.sock.close()
        self.client.close()


def drain(
    server: BeanstalkServer, workers: Workers, count: int, jobs: int
) -> tuple[float, float | None]:
    """The issue's measure: ``jobs`` queued at once, drained by ``count`` workers.

    Returns jobs/s and, for workers in a process of their own (the CLI), their CPU
    seconds per job: on this machine every process of the chain (cmdstalk, beanstalkd,
    the command) mostly shares one vCPU, so each µs of it is a µs of wall time per job.
    """
    queue = Queue(server)
    try:
        queue.client.pause_tube(queue.tube, 3600)
        queue.put(jobs)
        with workers(server, queue.tube, count) as cpu:
            queue.wait_watchers(count)
            cpu_before = cpu() if cpu is not None else 0.0
            # pause-tube's delay is whole seconds: "unpause" = a pause ending 1 s from now.
            queue.client.pause_tube(queue.tube, UNPAUSE_AFTER)
            started = time.perf_counter() + UNPAUSE_AFTER
            queue.wait_deleted(jobs, DRAIN_POLL)
            elapsed = time.perf_counter() - started
            cpu_per_job = (cpu() - cpu_before) / jobs if cpu is not None else None
        queue.check_all_deleted()
        return jobs / elapsed, cpu_per_job
    finally:
        queue.close()


def paired(
    server: BeanstalkServer,
    workers: Workers,
    count: int,
    jobs: int,
    batch: int,
    raw_run: Callable[[int], float] = time_raw,
) -> tuple[float, float, float]:
    """Batches of queued jobs alternating with batches of raw runs (``raw_run(jobs)``:
    seconds for that many, sequential by default).

    Returns (queue jobs/s, raw jobs/s, median over batch pairs of queue rate / raw rate):
    the median of per-pair ratios shrugs off the bursts of load that skew the totals.
    """
    queue = Queue(server)
    queue_time = raw_time = 0.0
    last_per_job: float | None = None
    pair_ratios: list[float] = []
    try:
        with workers(server, queue.tube, count):
            queue.wait_watchers(count)
            queue.put(WARMUP_JOBS)
            queue.wait_deleted(WARMUP_JOBS, BATCH_POLL)
            for index, start in enumerate(range(0, jobs, batch)):
                size = min(batch, jobs - start)
                raw_first = index % 2 == 1  # alternate the order: no systematic effect
                raw = raw_run(size) if raw_first else 0.0
                started = time.perf_counter()
                queue.put(size)
                # Expected per-job time: the previous batch's (polls stay sparse).
                queue.wait_deleted(queue.put_total, BATCH_POLL, last_per_job)
                queued = time.perf_counter() - started
                last_per_job = queued / size
                if not raw_first:
                    raw = raw_run(size)
                queue_time += queued
                raw_time += raw
                pair_ratios.append(raw / queued)
        queue.check_all_deleted()
        return jobs / queue_time, jobs / raw_time, statistics.median(pair_ratios)
    finally:
        queue.close()


def paired_spawn(jobs: int, batch: int) -> tuple[float, float, float]:
    """``run_command`` batches alternating with ``subprocess.run`` batches, as ``paired``."""
    spawn_time = raw_time = 0.0
    pair_ratios: list[float] = []
    for index, start in enumerate(range(0, jobs, batch)):
        size = min(batch, jobs - start)
        if index % 2:
            raw = time_raw(size)
            spawned = time_spawn(size)
        else:
            spawned = time_spawn(size)
            raw = time_raw(size)
        spawn_time += spawned
        raw_time += raw
        pair_ratios.append(raw / spawned)
    return jobs / spawn_time, jobs / raw_time, statistics.median(pair_ratios)


# -- profiling --------------------------------------------------------------------------------


def print_stats(stats: pstats.Stats, out: io.StringIO) -> None:
    stats.sort_stats("tottime").print_stats(25)
    print(out.getvalue())


def profile_loop(server: BeanstalkServer, jobs: int) -> float:
    """One loop worker under cProfile in this thread; a helper thread feeds and times."""
    queue = Queue(server)
    stop = threading.Event()
    rate: list[float] = []

    def feed_and_time() -> None:
        try:
            queue.wait_watchers(1)
            started = time.perf_counter()
            queue.put(jobs)
            queue.wait_deleted(jobs, DRAIN_POLL)
            rate.append(jobs / (time.perf_counter() - started))
        finally:
            stop.set()

    feeder = threading.Thread(target=feed_and_time)
    feeder.start()
    profiler = cProfile.Profile()
    profiler.enable()
    loop_worker(server, queue.tube, stop)
    profiler.disable()
    feeder.join()
    queue.close()
    out = io.StringIO()
    print_stats(pstats.Stats(profiler, stream=out), out)
    return rate[0]


def profile_cli(
    server: BeanstalkServer, jobs: int, per_tube: int, flag: str = "--per-tube"
) -> float:
    """The real CLI with every thread under cProfile (``flag``: ``--per-tube`` or
    ``--workers``); prints the merged profile."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cli.prof"

        @contextmanager
        def profiled(
            server: BeanstalkServer, tube: str, count: int
        ) -> Iterator[CpuProbe | None]:
            with cli_workers(server, tube, count, profile_to=path, flag=flag) as cpu:
                yield cpu

        rate, _ = drain(server, profiled, per_tube, jobs)
        out = io.StringIO()
        print_stats(pstats.Stats(str(path), stream=out), out)
        return rate


# -- main -------------------------------------------------------------------------------------


def compare_parallel(
    server: BeanstalkServer,
    count: int,
    jobs: int,
    batch: int,
    out: dict[str, list[float]],
    flip: bool = False,
) -> None:
    """The CLI with ``--workers count`` and with ``--per-tube count`` against the raw spawn
    ``count``-way parallel: a drain (raw measured right before it) and paired batches.

    ``flip``: measure ``--per-tube`` first (rounds alternate, so that neither flag always
    comes first after whatever ran before it).
    """
    flags = ("--per-tube", "--workers") if flip else ("--workers", "--per-tube")
    raw_run = partial(time_raw_parallel, threads=count)
    for flag in flags:
        raw = jobs / raw_run(jobs)
        shared: Workers = partial(cli_workers, flag=flag)
        rate, _ = drain(server, shared, count, jobs)
        name = f"cli{flag.removeprefix('-')}/{count}"
        out.setdefault(name, []).append(rate / raw)
        print(f"  {name:<16} {rate:7.1f} jobs/s   {rate / raw:5.2f} x raw {count}-thread "
              f"spawn ({raw:.1f} jobs/s)", flush=True)  # fmt: skip
        rate, raw, ratio = paired(server, shared, count, jobs, batch, raw_run)
        out.setdefault(f"{name} paired", []).append(ratio)
        print(f"  {name + ' paired':<16} {rate:7.1f} jobs/s   {ratio:5.2f} x raw {count}-thread "
              f"spawn (median of batch pairs; {raw:.1f} jobs/s)", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200, help="jobs per paired batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="300 jobs, one round")
    parser.add_argument(
        "--modes", default="cli,loop,spawn", help="subset of cli,go,broker,loop,spawn"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile a loop worker")
    parser.add_argument(
        "--profile-cli", type=int, metavar="PER_TUBE", help="cProfile the CLI (all threads)"
    )
    parser.add_argument(
        "--profile-workers", action="store_true",
        help="with --profile-cli N: the CLI with --workers N (shared workers), not --per-tube N",
    )  # fmt: skip
    parser.add_argument("--per-tube", default="1,4", help="worker counts to measure")
    parser.add_argument(
        "--cli-arg", action="append", default=[], help="extra argument for cmdstalk (repeatable)"
    )
    parser.add_argument(
        "--workers", default="", help="shared-worker counts: CLI --workers N and --per-tube N "
        "drains against the raw N-thread spawn (e.g. 4)",
    )  # fmt: skip
    parser.add_argument(
        "--go-cmdstalk", default=os.environ.get("CMDSTALK_GO_BIN"),
        help="Go cmdstalk's binary for the go mode (else built as idle.py builds it)",
    )  # fmt: skip
    parser.add_argument(
        "--go-sources", type=Path,
        default=Path(os.environ.get("CMDSTALK_GO_SOURCES", "/work/.mirror")),
        help="where Go cmdstalk's snapshots are, to build it (as idle.py)",
    )  # fmt: skip
    args = parser.parse_args()
    go_dir = tempfile.TemporaryDirectory(prefix="drain-go-")
    CLI_EXTRA_ARGS.extend(args.cli_arg)
    counts = [int(n) for n in args.per_tube.split(",")]
    shared_counts = [int(n) for n in args.workers.split(",") if n]
    parallel: dict[str, list[float]] = {}  # drain rate / raw N-thread rate, per figure
    jobs, repeat, batch = (300, 1, 30) if args.quick else (args.jobs, args.repeat, args.batch)
    modes = set(args.modes.split(","))
    if "cli" in modes and not cli_available():
        print("cmdstalk CLI not available yet: skipping the cli mode")
        modes.discard("cli")
    if "go" in modes:
        found, why = go_cmdstalk(args.go_cmdstalk, args.go_sources, Path(go_dir.name))
        if found is None:
            print(f"skipping the go mode: {why}")
            modes.discard("go")
        else:
            GO_BIN.append(found)

    print(f"drain benchmark: {jobs} jobs, {SHELL} {CMD!r}, {os.cpu_count()} cpus")
    rates: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    cpu_use: dict[str, list[float]] = {}  # workers' CPU seconds per job, drain runs

    def record(name: str, rate: float, ratio: float | None = None) -> None:
        rates.setdefault(name, []).append(rate)
        note = ""
        if ratio is not None:
            ratios.setdefault(name, []).append(ratio)
            note = f"   {ratio:5.2f} x raw (median of batch pairs)"
        print(f"  {name:<16} {rate:7.1f} jobs/s{note}", flush=True)

    with running_beanstalkd("-z", str(1 << 20)) as server:
        if args.profile:
            print(f"loop worker, profiled: {profile_loop(server, jobs):.1f} jobs/s")
            return
        if args.profile_cli:
            flag = "--workers" if args.profile_workers else "--per-tube"
            rate = profile_cli(server, jobs, args.profile_cli, flag)
            print(f"cli{flag.removeprefix('-')}/{args.profile_cli}, profiled: {rate:.1f} jobs/s")
            return
        kinds: list[tuple[str, Workers]] = []
        if "cli" in modes:
            kinds.append(("cli", cli_workers))
        if "go" in modes:
            kinds.append(("go", go_workers))
        if "broker" in modes:
            kinds.append(("broker", broker_workers))
        if "loop" in modes:
            kinds.append(("loop", loop_workers))
        for round_no in range(repeat):
            print(f"round {round_no + 1}/{repeat}")
            record("raw", jobs / time_raw(jobs))
            if "spawn" in modes:
                spawn_rate, raw_rate, ratio = paired_spawn(jobs, batch)
                record("spawn paired", spawn_rate, ratio)
                record("raw", raw_rate)
            for name, workers in kinds:
                for count in counts:
                    rate, cpu_per_job = drain(server, workers, count, jobs)
                    record(f"{name}/{count} drain", rate)
                    if cpu_per_job is not None:
                        cpu_use.setdefault(f"{name}/{count}", []).append(cpu_per_job)
                        print(f"  {'':<16} CPU {cpu_per_job * 1e6:5.0f} µs/job (workers' process)")
                    queue_rate, raw_rate, ratio = paired(server, workers, count, jobs, batch)
                    record(f"{name}/{count} paired", queue_rate, ratio)
                    record("raw", raw_rate)
            if "cli" in modes:
                for count in shared_counts:
                    compare_parallel(server, count, jobs, batch, parallel, flip=round_no % 2 == 1)

    raw = statistics.median(rates["raw"])
    print(f"\nmedians over {repeat} round(s); raw = {raw:.1f} jobs/s (median of all raw runs)")
    print("targets: per-tube 1 >= 0.90 x raw, per-tube 4 >= 1.40 x raw")
    for name, values in rates.items():
        if name == "raw":
            continue
        rate = statistics.median(values)
        if name in ratios:
            each = ", ".join(f"{r:.2f}" for r in ratios[name])
            how = f"{statistics.median(ratios[name]):5.2f} x raw, paired ({each})"
        else:
            how = f"{rate / raw:5.2f} x median raw"
        print(f"  {name:<16} {rate:7.1f} jobs/s  {how}")
    for name, values in parallel.items():
        each = ", ".join(f"{r:.2f}" for r in values)
        print(f"  {name:<16} {statistics.median(values):5.2f} x raw N-thread spawn ({each})")
    for name, values in cpu_use.items():
        print(
            f"  {name:<16} CPU {statistics.median(values) * 1e6:5.0f} µs/job in the workers'"
            f" process (raw loop: {statistics.median(RAW_CPU) * 1e6:.0f} µs/job in Python)"
        )


if __name__ == "__main__":
    main()
