"""Drain benchmark (issue 4): how fast cmdstalk turns queued jobs into finished processes.

2000 jobs in one tube on the real beanstalkd, command ``cat >/dev/null`` run by
``/bin/bash -c`` (as Go cmdstalk does), per-tube 1 and 4: jobs/s until every job is deleted
(stats-tube is polled). Against the raw spawn limit measured in the same run: the same
command started sequentially from Python with the payload on stdin via ``subprocess.run``,
no queue. Targets: per-tube 1 ≥ 0.90 x raw, per-tube 4 ≥ 1.4 x raw.

Modes measured (``--modes``):
- ``raw``: ``subprocess.run`` in a loop, the reference.
- ``spawn``: ``run_command`` in a loop, no queue (the cost of our process layer alone).
- ``loop``: a minimal reserve / run_command / delete loop per thread inside this process
  (what a broker costs without the CLI around it).
- ``cli``: the real ``cmdstalk`` CLI as a subprocess (the figure that counts).

Timing of queue modes: the jobs are put first while the tube is paused, the workers are
started and must be watching the tube, then the tube is unpaused and the clock starts; it
stops when stats-tube counts every job deleted. Each mode runs ``--repeat`` times,
interleaved with the others (the machine is shared, so load drifts); the median is reported.

``--profile`` runs the ``loop`` mode (per-tube 1) under cProfile and prints the top entries.

Usage: ``python benchmarks/drain.py [--quick] [--jobs N] [--repeat R] [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import greenstalk

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cmdstalk_py.process import run_command  # noqa: E402
from tests.helpers import BeanstalkServer, running_beanstalkd, wait_until  # noqa: E402

SHELL = ["/bin/bash", "-c"]
CMD = "cat >/dev/null"
ARGV = [*SHELL, CMD]
PAYLOAD = b'{"job": "drain benchmark", "pad": "' + b"x" * 40 + b'"}'
TTR = 120
POLL = 0.01  # stats-tube polling interval while draining
UNPAUSE_AFTER = 1  # seconds the tube stays paused while workers start (pause-tube unit)


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


# -- no queue -----------------------------------------------------------------------------


def bench_raw(jobs: int) -> float:
    """jobs/s of sequential ``subprocess.run`` with the payload on stdin."""
    env = child_env()
    started = time.perf_counter()
    for _ in range(jobs):
        subprocess.run(ARGV, input=PAYLOAD, env=env, check=True)
    return jobs / (time.perf_counter() - started)


def bench_spawn(jobs: int) -> float:
    """jobs/s of sequential ``run_command`` (no queue)."""
    env = child_env()
    started = time.perf_counter()
    for _ in range(jobs):
        result = run_command(ARGV, PAYLOAD, env)
        if result.exit_code != 0:
            raise RuntimeError(f"command failed: {result}")
    return jobs / (time.perf_counter() - started)


# -- queue modes ----------------------------------------------------------------------------


_tube_counter = 0


def fresh_tube() -> str:
    """A new tube name per run, so stats-tube counters start at zero."""
    global _tube_counter
    _tube_counter += 1
    return f"drain{os.getpid()}-{_tube_counter}"


def fill(server: BeanstalkServer, tube: str, jobs: int) -> greenstalk.Client[bytes]:
    """Put ``jobs`` jobs into a paused ``tube``; return the client used (keeps the tube)."""
    client = greenstalk.Client((server.host, server.port), use=tube, watch=tube, encoding=None)
    client.pause_tube(tube, 3600)
    for _ in range(jobs):
        client.put(PAYLOAD, ttr=TTR)
    return client


def deleted(client: greenstalk.Client[bytes], tube: str) -> int:
    return int(client.stats_tube(tube)["cmd-delete"])


def timed_drain(
    client: greenstalk.Client[bytes], tube: str, jobs: int, workers: int, timeout: float
) -> float:
    """Wait for ``workers`` watchers, unpause, and time until ``jobs`` deletes: jobs/s."""
    # Our own client watches the tube too.
    wait_until(
        lambda: int(client.stats_tube(tube)["current-watching"]) >= workers + 1,
        timeout=60,
        message=f"{workers} workers watching {tube}",
    )
    # pause-tube's delay is whole seconds; "unpause" = a pause that ends one second later.
    client.pause_tube(tube, UNPAUSE_AFTER)
    started = time.perf_counter() + UNPAUSE_AFTER
    deadline = started + timeout
    while deleted(client, tube) < jobs:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"drain of {tube} timed out: {client.stats_tube(tube)}")
        time.sleep(POLL)
    elapsed = time.perf_counter() - started
    stats = client.stats_tube(tube)
    if stats["current-jobs-buried"] or stats["current-jobs-delayed"]:
        raise RuntimeError(f"jobs failed during the drain: {stats}")
    return jobs / elapsed


def loop_worker(
    server: BeanstalkServer, tube: str, stop: threading.Event, ready: Callable[[], object]
) -> None:
    """A minimal broker: reserve, stats-job, run_command, delete."""
    env = child_env()
    address = (server.host, server.port)
    with greenstalk.Client(address, use=tube, watch=tube, encoding=None) as client:
        ready()
        while not stop.is_set():
            try:
                job = client.reserve(timeout=1)
            except greenstalk.TimedOutError:
                continue
            client.stats_job(job)  # the supervisor does one per job
            assert isinstance(job.body, bytes)
            result = run_command(ARGV, job.body, env)
            if result.exit_code != 0:
                raise RuntimeError(f"command failed: {result}")
            client.delete(job)


def bench_loop(server: BeanstalkServer, jobs: int, workers: int, profile: bool = False) -> float:
    """jobs/s of ``workers`` in-process reserve/run/delete loops."""
    tube = fresh_tube()
    client = fill(server, tube, jobs)
    stop = threading.Event()
    started = threading.Semaphore(0)
    threads = [
        threading.Thread(target=loop_worker, args=(server, tube, stop, started.release))
        for _ in range(workers)
    ]
    try:
        if profile:
            return profile_loop(server, client, tube, jobs, stop)
        for thread in threads:
            thread.start()
        return timed_drain(client, tube, jobs, workers, 600)
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join()
        client.close()


def profile_loop(
    server: BeanstalkServer,
    client: greenstalk.Client[bytes],
    tube: str,
    jobs: int,
    stop: threading.Event,
) -> float:
    """One worker under cProfile in this thread; the drain is timed by another thread."""
    rate: list[float] = []

    def time_it() -> None:
        try:
            rate.append(timed_drain(client, tube, jobs, 1, 600))
        finally:
            stop.set()

    timer = threading.Thread(target=time_it)
    timer.start()
    profiler = cProfile.Profile()
    profiler.enable()
    loop_worker(server, tube, stop, lambda: None)
    profiler.disable()
    timer.join()
    print_profile(profiler)
    return rate[0]


def cli_argv(profile_to: Path | None = None) -> list[str]:
    """The cmdstalk CLI; with ``profile_to``, every thread of it runs under cProfile."""
    if profile_to is None:
        return [sys.executable, "-c", "from cmdstalk_py.cli import main; main()"]
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
from cmdstalk_py.cli import main
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
def running_cli(
    server: BeanstalkServer, tube: str, per_tube: int, profile_to: Path | None = None
) -> Iterator[None]:
    proc = subprocess.Popen(
        [
            *cli_argv(profile_to),
            "--address",
            server.address,
            "--tubes",
            tube,
            "--per-tube",
            str(per_tube),
            "--cmd",
            CMD,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bench_cli(
    server: BeanstalkServer, jobs: int, per_tube: int, profile_to: Path | None = None
) -> float:
    """jobs/s of the real cmdstalk CLI draining the tube."""
    tube = fresh_tube()
    client = fill(server, tube, jobs)
    try:
        with running_cli(server, tube, per_tube, profile_to):
            return timed_drain(client, tube, jobs, per_tube, 600)
    finally:
        client.close()


def profile_cli(server: BeanstalkServer, jobs: int, per_tube: int) -> float:
    """The real CLI with every thread under cProfile; prints the merged profile."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cli.prof"
        rate = bench_cli(server, jobs, per_tube, profile_to=path)
        out = io.StringIO()
        pstats.Stats(str(path), stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
        return rate


def print_profile(profiler: cProfile.Profile) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    print(out.getvalue())


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="300 jobs, one repeat")
    parser.add_argument("--profile", action="store_true", help="cProfile the loop mode")
    parser.add_argument(
        "--profile-cli", type=int, metavar="PER_TUBE", help="cProfile the CLI (all threads)"
    )
    parser.add_argument(
        "--modes",
        default="spawn,loop,cli",
        help="comma-separated subset of spawn,loop,cli (raw always runs)",
    )
    args = parser.parse_args()
    jobs, repeat = (300, 1) if args.quick else (args.jobs, args.repeat)
    modes = set(args.modes.split(","))
    modes.add("raw")
    if "cli" in modes and not cli_available():
        print("cmdstalk CLI not available yet: skipping the cli mode")
        modes.discard("cli")

    rates: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}

    def record(name: str, rate: float, ratio: float | None = None) -> None:
        rates.setdefault(name, []).append(rate)
        note = ""
        if ratio is not None:
            ratios.setdefault(name, []).append(ratio)
            note = f"  {ratio:5.2f} x raw (adjacent)"
        print(f"  {name:<8} {rate:8.1f} jobs/s{note}", flush=True)

    print(f"drain benchmark: {jobs} jobs, command {SHELL} {CMD!r}, {os.cpu_count()} cpus")
    with running_beanstalkd("-z", str(1 << 20)) as server:
        if args.profile:
            record("loop/1 profiled", bench_loop(server, jobs, 1, profile=True))
            return
        if args.profile_cli:
            rate = profile_cli(server, jobs, args.profile_cli)
            record(f"cli/{args.profile_cli} profiled", rate)
            return
        measurements: list[tuple[str, Callable[[], float]]] = []
        if "spawn" in modes:
            measurements.append(("spawn", partial(bench_spawn, jobs)))
        for n in (1, 4):
            if "loop" in modes:
                measurements.append((f"loop/{n}", partial(bench_loop, server, jobs, n)))
        for n in (1, 4):
            if "cli" in modes:
                measurements.append((f"cli/{n}", partial(bench_cli, server, jobs, n)))
        for round_no in range(repeat):
            print(f"round {round_no + 1}/{repeat}")
            # Raw runs before and after every measurement: the machine is shared and its
            # load drifts, so each figure is compared with the raw limit measured around it.
            raw_before = bench_raw(jobs)
            record("raw", raw_before)
            for name, measure in measurements:
                rate = measure()
                raw_after = bench_raw(jobs)
                record(name, rate, rate / ((raw_before + raw_after) / 2))
                record("raw", raw_after)
                raw_before = raw_after

    print("\nmedians" + ("" if repeat == 1 else f" over {repeat} rounds"))
    print("  (ratio: to the mean of the raw runs just before and after; targets:")
    print("   per-tube 1 >= 0.90 x raw, per-tube 4 >= 1.40 x raw)")
    for name, values in rates.items():
        line = f"  {name:<8} {statistics.median(values):8.1f} jobs/s"
        if name in ratios:
            line += f"  ratio {statistics.median(ratios[name]):5.2f}"
            line += f"  (all: {', '.join(f'{r:.2f}' for r in ratios[name])})"
        print(line)


if __name__ == "__main__":
    main()
