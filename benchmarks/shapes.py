"""Worker shapes against the raw spawn (issue 18): the ceiling of each way to run jobs.

Issue 18 asks ``cmdstalk --workers 4`` to drain at >= 0.85 x the raw 4-thread spawn of the
same command. On a machine with few cores the drain is CPU-bound: its rate is set by the
CPU each job costs every process of the chain (beanstalkd, the command, the worker), so
the worker's own CPU per job decides the ratio. Whether to redesign the supervisor around
one poll loop for all workers (instead of a thread per worker) turns on what each shape of
worker can reach at best, with no supervisor features, against the raw spawn measured in
the same round. The shapes, each running N jobs at a time (``--workers``):

- ``raw``: N threads each running the command with ``subprocess.run`` in a loop, no queue
  (drain.py's ``time_raw_parallel``): the reference.
- ``threads``: N threads, each drain.py's ``loop_worker`` (greenstalk reserve, stats-job,
  ``run_command``, delete): today's shape, stripped to its minimum.
- ``poll-loop``: one thread, one epoll, N non-blocking connections to beanstalkd, each a
  small state machine (reserve, stats-job, spawn, delete); the command started with
  ``os.posix_spawn`` (stdin on a pipe, new session) and its exit seen on a pidfd in the
  same epoll (``shapes_loop.py``).
- ``poll-loop-full``: the same loop carrying the system calls and work the supervisor's
  features add per job: ``process.spawn`` with stdout, stderr and control pipes read until
  they hang up, the job's environment (``job_environment``, the run marker, the control
  fd), the stats-job reply parsed, three short writes where the sentinel's messages go, a
  check of the process group after the reap and one log line to a file.
- ``asyncio`` and ``asyncio-full`` (issue 26): the same two on one asyncio event loop, a
  coroutine per connection over an ``asyncio.Protocol``, the runners of ``poll-loop`` on
  ``loop.add_reader`` (``shapes_aio.py``); ``uvloop`` and ``uvloop-full`` the same on uvloop
  (skipped, with the reason, where it cannot be imported).
- ``own-coro`` and ``own-coro-full`` (issue 26): the same coroutines and runners on the
  project's own loop (``cmdstalk_py.loop``: ``core.Loop``, its futures and tasks), each
  connection a non-blocking socket read on ``add_reader`` (the loop has no transports).

The command is drain.py's (``/bin/bash -c 'cat >/dev/null'``, its payload on stdin). Each
queue shape drains a fresh tube of the real beanstalkd (started here on 127.0.0.1): the
jobs are put while the tube is paused, the workers start and watch it, and the clock runs
from the unpause until stats-tube counts every job deleted. Per shape: jobs/s, the ratio
to the raw rate of the same round, and the CPU per job of each part of the chain: this
process (``time.process_time`` deltas; every shape runs in it, raw included), the commands
(reaped here, ``RUSAGE_CHILDREN``: a richer environment costs the command too) and
beanstalkd. ``CPU x raw`` is the raw chain's CPU per job over the shape's: the ratio the
rate tends to while the chain alone keeps every core busy, and far steadier than the rates
on a machine shared with other work. Rounds alternate the order of the shapes, so that
none always runs after the same one.

``--ablate`` adds ``poll-loop-full`` without each of its features in turn (``full -log``:
all but the log line): its CPU per job against ``poll-loop-full``'s is what that feature
costs this process per job.

``--patterns`` adds the other ways to write an asyncio worker (``shapes_aio.py``: a
BufferedProtocol, streams, ``sock_recv``, the own loop's socket on ``add_reader``, plain
callbacks, ``create_subprocess_exec``), on each loop, and ``Slot``'s callbacks on the own
loop. ``--shapes a,b`` runs only those (raw always). Each round's header shows the load
average: on a machine busy with other work the rates say little (one loop thread gets one
thread's share of the CPU, raw's four threads four shares); CPU per job holds up better.

Usage: ``python benchmarks/shapes.py [--quick] [--jobs N] [--workers N] [--rounds R]
[--shapes NAMES] [--ablate] [--patterns]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial

import psutil
from drain import (
    CMD,
    DRAIN_POLL,
    SHELL,
    UNPAUSE_AFTER,
    EndWatch,
    Queue,
    child_env,
    loop_worker,
    process_cpu,
    running,
    time_raw_parallel,
)
from shapes_aio import ASYNCIO, OWN, UVLOOP, Variant, Workers, uvloop_missing
from shapes_loop import FEATURES, BareRunner, FullRunner, Loop, Reactor, Runner, Slot, connect

from tests.helpers import BeanstalkServer, beanstalkd_path, running_beanstalkd

#: Workers of one shape on a tube, until the block ends; a worker's exception goes to the
#: list (the drain then stops waiting and raises it).
Shape = Callable[[BeanstalkServer, str, int, list[BaseException]], AbstractContextManager[None]]
MakeRunner = Callable[[Reactor, str, dict[str, str]], Runner]
ORDER = ("raw", "threads", "poll-loop", "poll-loop-full", "own-coro", "own-coro-full", "asyncio",
         "asyncio-full", "uvloop", "uvloop-full")  # fmt: skip
#: ``--ablate``: ``poll-loop-full`` without each of its features in turn, e.g. ``full -log``.
ABLATIONS = tuple(f"full -{feature}" for feature in sorted(FEATURES))
#: ``--patterns``: the other ways to write an asyncio worker (``shapes_aio``), per loop.
PATTERNS = ("own callbacks", "asyncio buffered", "asyncio streams", "asyncio sock",
            "asyncio reader", "asyncio callbacks", "asyncio subprocess", "asyncio subprocess-pidfd",
            "uvloop buffered", "uvloop streams", "uvloop sock", "uvloop reader", "uvloop callbacks",
            "uvloop subprocess")  # fmt: skip
#: Per worker count, the ``x raw`` the supervisor's redesign (issue 26) aims at.
TARGETS = {1: 0.95, 4: 0.88}
DRAIN_TIMEOUT = 600.0


@dataclass(frozen=True)
class Cpu:
    """CPU seconds (so far, or per job) of each part of the chain."""

    own: float  # this process (every shape runs in it, raw included)
    commands: float  # the commands: every shape reaps them in this process
    server: float  # beanstalkd

    @property
    def chain(self) -> float:
        return self.own + self.commands + self.server


class CpuMeter:
    """Reads ``Cpu`` so far, for the beanstalkd this process started for ``server``."""

    def __init__(self, server: BeanstalkServer) -> None:
        port = str(server.port)
        found = [p for p in psutil.Process().children() if port in _cmdline(p)]
        if len(found) != 1:
            raise RuntimeError(f"not one child process serving port {port}: {found}")
        self.server_pid = found[0].pid

    def now(self) -> Cpu:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        commands = children.ru_utime + children.ru_stime
        # Scheduler nanoseconds: beanstalkd's share per job is below a clock tick.
        return Cpu(time.process_time(), commands, process_cpu(self.server_pid))


def _cmdline(process: psutil.Process) -> list[str]:
    """Its command line; none for a child that is gone or not yet reaped."""
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


@dataclass(frozen=True)
class Result:
    rate: float  # jobs/s
    cpu: Cpu  # per job


def result(jobs: int, seconds: float, before: Cpu, after: Cpu) -> Result:
    per_job = Cpu(
        (after.own - before.own) / jobs,
        (after.commands - before.commands) / jobs,
        (after.server - before.server) / jobs,
    )
    return Result(jobs / seconds, per_job)


@contextmanager
def thread_workers(
    server: BeanstalkServer, tube: str, count: int, failures: list[BaseException]
) -> Iterator[None]:
    """``threads``: ``count`` threads, each drain.py's ``loop_worker``."""
    stop = threading.Event()

    def work() -> None:
        try:
            loop_worker(server, tube, stop)
        except BaseException as exc:
            failures.append(exc)

    with running([work] * count, stop):
        yield


@contextmanager
def poll_loop_workers(
    server: BeanstalkServer,
    tube: str,
    count: int,
    failures: list[BaseException],
    make_runner: MakeRunner,
) -> Iterator[None]:
    """``poll-loop`` and ``poll-loop-full``: one thread, ``count`` connections."""
    loop = Loop()
    with ExitStack() as stack:
        stack.callback(loop.close)
        socks = [stack.enter_context(connect(server.host, server.port, tube)) for _ in range(count)]
        runner = make_runner(loop, tube, child_env())
        stack.callback(runner.close)

        def run() -> None:
            try:
                for sock in socks:
                    Slot(loop, sock, runner)
                loop.run()
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        try:
            yield
        finally:
            loop.stop()
            thread.join()


@contextmanager
def event_loop_workers(
    server: BeanstalkServer,
    tube: str,
    count: int,
    failures: list[BaseException],
    variant: Variant,
) -> Iterator[None]:
    """``own-coro``, ``asyncio``, ``uvloop`` and ``--patterns``: one event loop in one
    thread."""
    with Workers(variant, server, tube, failures).running(count, child_env()):
        yield


def variants() -> dict[str, Variant]:
    """Each event-loop shape by name (``SHAPES`` runs them through ``event_loop_workers``)."""
    variants = {
        "own-coro": Variant(OWN, pattern="reader"),
        "own-coro-full": Variant(OWN, pattern="reader", make_runner=FullRunner),
        "own callbacks": Variant(OWN, pattern="callbacks"),
    }
    for name, kind in (("asyncio", ASYNCIO), ("uvloop", UVLOOP)):
        variants[name] = Variant(kind)
        variants[f"{name}-full"] = Variant(kind, make_runner=FullRunner)
        for pattern in ("buffered", "streams", "sock", "reader", "callbacks"):
            variants[f"{name} {pattern}"] = Variant(kind, pattern=pattern)
        variants[f"{name} subprocess"] = Variant(kind, spawn="subprocess")
    variants["asyncio subprocess-pidfd"] = Variant(ASYNCIO, spawn="subprocess-pidfd")
    return variants


SHAPES: dict[str, Shape] = {
    **{name: partial(event_loop_workers, variant=variant) for name, variant in variants().items()},
    "threads": thread_workers,
    "poll-loop": partial(poll_loop_workers, make_runner=BareRunner),
    "poll-loop-full": partial(poll_loop_workers, make_runner=FullRunner),
    **{
        f"full -{feature}": partial(
            poll_loop_workers, make_runner=partial(FullRunner, features=FEATURES - {feature})
        )
        for feature in FEATURES
    },
}


def wait_drained(queue: Queue, jobs: int, failures: list[BaseException]) -> None:
    """Return once ``jobs`` jobs of the tube are deleted; raise a worker's failure at once.

    Polls as sparingly as drain.py does (``EndWatch``): each stats-tube costs beanstalkd
    and this process CPU the measured chain needs.
    """
    deadline = time.perf_counter() + DRAIN_TIMEOUT
    watch = EndWatch(jobs, DRAIN_POLL, None, time.perf_counter(), queue.deleted())
    while not watch.finished:
        if failures:
            raise RuntimeError(f"a worker failed: {failures[0]!r}") from failures[0]
        if watch.last_at > deadline:
            raise RuntimeError(f"{queue.tube} not drained: {queue.stats()}")
        time.sleep(watch.sleep())
        watch.seen(time.perf_counter(), queue.deleted())


def check_drained(queue: Queue, jobs: int) -> None:
    """Every job deleted, none left ready, reserved, delayed or buried."""
    stats = queue.stats()
    left = {
        "ready": stats["current-jobs-ready"],
        "reserved": stats["current-jobs-reserved"],
        "delayed": stats["current-jobs-delayed"],
        "buried": stats["current-jobs-buried"],
    }
    if stats["cmd-delete"] != jobs or any(left.values()):
        raise RuntimeError(
            f"{queue.tube}: {stats['cmd-delete']} of {jobs} jobs deleted; left: {left}"
        )


def drain_queue(
    server: BeanstalkServer, meter: CpuMeter, shape: Shape, count: int, jobs: int
) -> Result:
    """``jobs`` put on a paused fresh tube, drained by ``shape`` from the unpause."""
    queue = Queue(server)
    failures: list[BaseException] = []
    try:
        queue.client.pause_tube(queue.tube, 3600)
        queue.put(jobs)
        with shape(server, queue.tube, count, failures):
            queue.wait_watchers(count)
            cpu = meter.now()
            # pause-tube's delay is whole seconds: "unpause" = a pause ending 1 s from now.
            queue.client.pause_tube(queue.tube, UNPAUSE_AFTER)
            started = time.perf_counter() + UNPAUSE_AFTER
            time.sleep(UNPAUSE_AFTER)  # no polls while nothing can happen
            wait_drained(queue, jobs, failures)
            drained = result(jobs, time.perf_counter() - started, cpu, meter.now())
        if failures:  # one that came after the last job was counted
            raise RuntimeError(f"a worker failed: {failures[0]!r}") from failures[0]
        check_drained(queue, jobs)
        return drained
    finally:
        queue.close()


def drain_raw(meter: CpuMeter, count: int, jobs: int) -> Result:
    cpu = meter.now()
    return result(jobs, time_raw_parallel(jobs, count), cpu, meter.now())


def run_round(
    server: BeanstalkServer, names: tuple[str, ...], flip: bool, count: int, jobs: int
) -> dict[str, Result]:
    """Each of ``names`` once, in that order or (``flip``) the reverse; printed in order."""
    meter = CpuMeter(server)
    results: dict[str, Result] = {}
    for name in names[::-1] if flip else names:
        if name == "raw":
            results[name] = drain_raw(meter, count, jobs)
        else:
            results[name] = drain_queue(server, meter, SHAPES[name], count, jobs)
    raw = results["raw"]
    for name in names:
        done, cpu = results[name], results[name].cpu
        print(f"  {name:<24} {done.rate:7.1f} jobs/s  {done.rate / raw.rate:5.2f} x raw  "
              f"CPU µs/job: ours {cpu.own * 1e6:4.0f}, commands {cpu.commands * 1e6:4.0f}, "
              f"beanstalkd {cpu.server * 1e6:3.0f}", flush=True)  # fmt: skip
    return results


def print_table(names: tuple[str, ...], rounds: list[dict[str, Result]]) -> None:
    """Medians over rounds. ``CPU x raw``: the raw chain's CPU per job over the shape's, the
    ratio its rate tends to while the chain alone keeps every core busy."""
    print(f"\nmedians over {len(rounds)} round(s); x raw: to the raw rate of the same round")
    print(f"  {'shape':<24} {'jobs/s':>7}  {'x raw':>5}  CPU µs/job: {'ours':>4} {'commands':>8} "
          f"{'beanstalkd':>10}  {'CPU x raw':>9}  (x raw per round)")  # fmt: skip

    def median(values: Iterator[float]) -> float:
        return statistics.median(values)

    for name in names:
        ratios = [r[name].rate / r["raw"].rate for r in rounds]
        each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        print(f"  {name:<24} {median(r[name].rate for r in rounds):7.1f}  "
              f"{statistics.median(ratios):5.2f}  "
              f"{'':>11} {median(r[name].cpu.own for r in rounds) * 1e6:4.0f} "
              f"{median(r[name].cpu.commands for r in rounds) * 1e6:8.0f} "
              f"{median(r[name].cpu.server for r in rounds) * 1e6:10.0f}  "
              f"{median(r['raw'].cpu.chain / r[name].cpu.chain for r in rounds):9.2f}  "
              f"({each})")  # fmt: skip


def shape_names(args: argparse.Namespace) -> tuple[str, ...]:
    """The shapes asked for, ``raw`` first; uvloop's dropped (and why printed) without it."""
    names = [name for name in args.shapes.split(",") if name] if args.shapes else list(ORDER)
    names += ABLATIONS if args.ablate else ()
    names += PATTERNS if args.patterns else ()
    unknown = [name for name in names if name != "raw" and name not in SHAPES]
    if unknown:
        raise SystemExit(f"Error: no shape {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    if (why := uvloop_missing()) and any(name.startswith("uvloop") for name in names):
        print(f"uvloop shapes skipped: {why}")
        names = [name for name in names if not name.startswith("uvloop")]
    return ("raw", *dict.fromkeys(name for name in names if name != "raw"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--workers", type=int, default=4, help="jobs run at a time")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 jobs, one round")
    parser.add_argument("--shapes", help=f"comma-separated (default: {','.join(ORDER)})")
    parser.add_argument(
        "--ablate", action="store_true",
        help="also poll-loop-full without each of its features in turn (what each costs)",
    )  # fmt: skip
    parser.add_argument(
        "--patterns", action="store_true",
        help="also the other ways to write an event-loop worker (streams, sock, reader, "
        "callbacks, create_subprocess_exec)",
    )  # fmt: skip
    args = parser.parse_args()
    jobs, rounds = (200, 1) if args.quick else (args.jobs, args.rounds)
    if beanstalkd_path() is None:
        print("shapes benchmark skipped: beanstalkd not found (set BEANSTALKD_PATH)")
        return
    names = shape_names(args)
    print(f"worker shapes: {jobs} jobs, {args.workers} at a time, {SHELL} {CMD!r}, "
          f"{os.cpu_count()} cpus, {rounds} round(s)")  # fmt: skip
    results: list[dict[str, Result]] = []
    with running_beanstalkd("-z", str(1 << 20)) as server:
        for index in range(rounds):
            flip = index % 2 == 1
            order = ", ".join(names[::-1] if flip else names)
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"round {index + 1}/{rounds} (load average {load}): {order}", flush=True)
            results.append(run_round(server, names, flip, args.workers, jobs))
    print_table(names, results)
    if args.workers in TARGETS:
        print(f"target (issue 26) at {args.workers} worker(s): x raw >= {TARGETS[args.workers]}")


if __name__ == "__main__":
    main()
