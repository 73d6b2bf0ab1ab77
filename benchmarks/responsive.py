"""Responsiveness benchmark (issue 26): a job's start on an idle tube while hundreds of
commands run and two of them flood.

One ``cmdstalk --config`` with two pools, on the real beanstalkd (the bundled server
without it): ``busy`` (``--sleepers`` + 2 workers on tube ``busy``) and ``probe`` (one
worker on tube ``probe``). ``--sleepers`` jobs (500) of ``sleep 3600`` keep that many
commands running through the run. Then, in rounds whose order alternates (quiet first,
then floods first, ...), two conditions:

- ``quiet``: only the sleepers run: the reference;
- ``floods``: two more jobs on ``busy`` run ``yes`` on their stdout (as fast as the
  supervisor reads it) and ``yes touch`` on their control channel (``CMDSTALK_CONTROL_FD``),
  started and settled before the condition's clock starts, killed at its end (each then
  exits 0, so its job is deleted and never run again).

In each condition a probe puts ``--probes`` jobs on ``probe``, one at a time, each once the
probe worker is waiting in ``reserve`` again (``current-waiting`` of ``stats-tube``) and a
jittered ``--gap`` has passed. Each job's command (bash) writes its start
(``$EPOCHREALTIME``) to a FIFO the benchmark reads; its latency is that minus the time just
before the put. Per condition: p50/p95/p99/max of every round's probes; the supervisor's
loop lag (``cmdstalk_loop_lag_seconds`` scraped from ``--metrics`` every 0.5 s: the longest
the loop was held since the supervisor's last heartbeat; max and median) and its "event
loop was held" warnings; its CPU (percent of one core) and how long its loop's thread was
runnable but waiting for a CPU (a hold the busy machine caused, not our code); for the
floods, how fast each ``yes`` wrote and the longest hold while they started. Target: p99
with floods within 2x of quiet's. Exit 0 when measured (``--strict``: 1 when the target is
missed), 2 when something failed to start.

Usage: ``python benchmarks/responsive.py [--quick] [--sleepers N] [--rounds R]
[--probes N] [--gap S] [--settle S] [--keep DIR] [--strict]``
"""

from __future__ import annotations

import argparse
import os
import random
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import greenstalk
import psutil
from idle import cmdstalk_argv, cpu_seconds, stop
from server_procs import HOST, ServerStartError, beanstalkd_kind, bundled_kind, start_server

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0
READY_TIMEOUT = 180.0  # 500 workers connecting on a shared two-core machine
START_TIMEOUT = 30.0  # a probe not started by then is counted as never started
SCRAPE_EVERY = 0.5  # the supervisor sets the gauge at its heartbeat, every second
LONG_TTR = 3600  # the sleepers and floods are never near their TTR
FLOODS = ("out", "ctl")
LAG_WARNING = "the event loop was held for"


@dataclass
class Condition:
    """What one condition gathered over every round."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    unstarted: int = 0
    lag_samples_s: list[float] = field(default_factory=list)
    start_lag_s: list[float] = field(default_factory=list)  # floods: while they settle
    warnings: int = 0
    cpu_seconds: float = 0.0
    waited_seconds: float = 0.0  # the loop's thread, runnable but not on a CPU
    wall_seconds: float = 0.0
    flood_bytes: dict[str, int] = field(default_factory=dict)
    flood_seconds: float = 0.0

    def percentile(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    @property
    def cpu_percent(self) -> float:
        return 100 * self.cpu_seconds / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def waited_percent(self) -> float:
        return 100 * self.waited_seconds / self.wall_seconds if self.wall_seconds else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0-1) of ``values``; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def loop_lag(metrics_text: str) -> float | None:
    """``cmdstalk_loop_lag_seconds`` from a Prometheus page (None when it is not there)."""
    found = re.search(r"^cmdstalk_loop_lag_seconds (\S+)$", metrics_text, re.M)
    return float(found.group(1)) if found else None


def pools_toml(address: str, sleepers: int, work: Path) -> str:
    """Two pools: ``busy`` runs what its payload names (``sleep``, ``out``, ``ctl``);
    ``probe`` writes its payload and its start to the FIFO."""
    busy = (
        'read m; case "$m" in '
        "sleep) exec sleep 3600;; "
        f"out) yes & echo $! > {work}/out.tmp && mv {work}/out.tmp {work}/out.pid; wait; exit 0;; "
        f"ctl) yes touch >&3 & echo $! > {work}/ctl.tmp && mv {work}/ctl.tmp {work}/ctl.pid; "
        "wait; exit 0;; "
        "esac"
    )
    probe = f'read p; echo "$p $EPOCHREALTIME" > {work}/starts'
    return (
        f'address = "{address}"\n\n'
        f'[pools.busy]\ntubes = ["busy"]\nper_tube = {sleepers + len(FLOODS)}\n'
        f'shell = ["/bin/sh", "-c"]\ncommand = {_toml_string(busy)}\n\n'
        '[pools.probe]\ntubes = ["probe"]\nper_tube = 1\n'
        f'shell = ["/bin/bash", "-c"]\ncommand = {_toml_string(probe)}\n'
    )


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextmanager
def supervisor(config: Path, metrics_port: int, log: Path) -> Iterator[psutil.Process]:
    """``cmdstalk --config`` with ``--metrics``; stopped (SIGTERM, then SIGKILL) at the end."""
    argv = [*cmdstalk_argv(), "--config", str(config), "--metrics", f"{HOST}:{metrics_port}",
            "--shutdown-timeout", "5"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMDSTALK_")}
    env["PYTHONPATH"] = str(ROOT)
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)  # fmt: skip
    try:
        yield psutil.Process(proc.pid)
    finally:
        stop(proc)


def wait_for(
    what: str, ready: Callable[[], bool], proc: psutil.Process, log: Path, timeout: float
) -> None:
    """Poll ``ready()`` every 20 ms until true; an error if the supervisor died first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
            raise ServerStartError(f"cmdstalk exited: {log.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise ServerStartError(f"{what}: not within {timeout:g} s")
        time.sleep(0.02)


def sleeping(proc: psutil.Process) -> int:
    """How many of ``proc``'s children run ``sleep`` (the sleepers' shells exec it)."""
    count = 0
    for child in proc.children():
        try:
            count += child.name() == "sleep"
        except psutil.Error:
            continue  # gone meanwhile
    return count


def loop_waited(pid: int) -> float:
    """Seconds the supervisor's loop thread (its main thread) has waited on a run queue:
    a hold the loop's lag counts that no code of ours caused (the machine is busy)."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[1]) / 1e9


def tube_stat(client: greenstalk.Client[str], tube: str, key: str) -> int:
    try:
        return int(client.stats_tube(tube)[key])  # type: ignore[literal-required]
    except greenstalk.NotFoundError:
        return 0  # not made yet: nobody watches it, nothing in it


class LagWatch:
    """Scrapes the loop-lag gauge every ``SCRAPE_EVERY`` seconds while active."""

    def __init__(self, port: int) -> None:
        self.url = f"http://{HOST}:{port}/metrics"
        self.samples: list[float] | None = None  # None: not gathering
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lag-watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_EVERY):
            samples = self.samples
            if samples is None:
                continue
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    lag = loop_lag(r.read().decode())
            except OSError:
                continue
            if lag is not None:
                samples.append(lag)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Probe:
    """Puts probe jobs one at a time; each job's command writes its start to a FIFO."""

    def __init__(self, client: greenstalk.Client[str], fifo: Path, gap: float) -> None:
        self.client = client
        self.gap = gap
        self.number = 0
        os.mkfifo(fifo)
        # Read-write: opening for writing never waits, and the FIFO never reads as ended.
        self.fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.buffer = b""

    def run(self, count: int, into: Condition) -> None:
        for _ in range(count):
            latency = self.one()
            if latency is None:
                into.unstarted += 1
            else:
                into.latencies_ms.append(latency)

    def one(self) -> float | None:
        """One probe job: put once the worker waits; put to start in ms (None: never)."""
        self._wait_idle()
        time.sleep(self.gap * random.uniform(0.5, 1.5))  # no lockstep with periodic work
        self.number += 1
        put = time.time()
        self.client.put(f"{self.number} {put:.6f}", ttr=60)
        deadline = time.monotonic() + START_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            for line in self._lines(left):
                n, put_text, start = line.split()
                if int(n) == self.number:
                    return (float(start) - float(put_text)) * 1000
        return None

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while tube_stat(self.client, "probe", "current-waiting") < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the probe worker is not back in reserve")
            time.sleep(0.002)

    def _lines(self, timeout: float) -> list[str]:
        readable, _, _ = select.select([self.fd], [], [], timeout)
        if readable:
            self.buffer += os.read(self.fd, 65536)
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode() for line in lines if line.strip()]

    def close(self) -> None:
        os.close(self.fd)


@contextmanager
def flooding(client: greenstalk.Client[str], sleepers: int, work: Path, settle: float,
             into: Condition) -> Iterator[None]:  # fmt: skip
    """Both floods running and settled; killed at the end (their jobs deleted)."""
    pidfiles = [work / f"{name}.pid" for name in FLOODS]
    for name in FLOODS:
        client.put(name, ttr=LONG_TTR)
    deadline = time.monotonic() + READY_TIMEOUT
    while not all(p.exists() for p in pidfiles):
        if time.monotonic() > deadline:
            raise RuntimeError("the flood commands did not start")
        time.sleep(0.02)
    pids = [int(p.read_text()) for p in pidfiles]
    time.sleep(settle)  # past the first burst of logged lines
    written = [_written(pid) for pid in pids]
    started = time.monotonic()
    try:
        yield
    finally:
        into.flood_seconds += time.monotonic() - started
        for name, pid, before in zip(FLOODS, pids, written, strict=True):
            into.flood_bytes[name] = into.flood_bytes.get(name, 0) + _written(pid) - before
            os.kill(pid, signal.SIGTERM)
        for p in pidfiles:
            p.unlink()
        deadline = time.monotonic() + READY_TIMEOUT
        while tube_stat(client, "busy", "current-jobs-reserved") > sleepers:
            if time.monotonic() > deadline:
                raise RuntimeError("the flood jobs did not end")
            time.sleep(0.02)


def _written(pid: int) -> int:
    """Bytes ``pid`` has written (``wchar`` of /proc/PID/io)."""
    return int(psutil.Process(pid).io_counters().write_chars)


def warnings_in(log: Path, offset: int) -> tuple[int, int]:
    """(lag warnings in ``log`` past ``offset``, the log's size now)."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read()
    return text.count(LAG_WARNING.encode()), offset + len(text)


def run_condition(name: str, cond: Condition, probe: Probe, count: int, ps: psutil.Process,
                  lag: LagWatch, log: Path) -> None:  # fmt: skip
    print(f"  {name}: {count} probes ...", flush=True)
    _, offset = warnings_in(log, 0)
    cpu0, waited0, t0 = cpu_seconds(ps.pid), loop_waited(ps.pid), time.monotonic()
    lag.samples = cond.lag_samples_s
    try:
        probe.run(count, cond)
    finally:
        lag.samples = None
    cond.cpu_seconds += cpu_seconds(ps.pid) - cpu0
    cond.waited_seconds += loop_waited(ps.pid) - waited0
    cond.wall_seconds += time.monotonic() - t0
    time.sleep(0.6)  # the last lag warning of the condition reaches the log
    cond.warnings += warnings_in(log, offset)[0]


def measure(args: argparse.Namespace, work: Path) -> tuple[Condition, Condition]:
    kind = beanstalkd_kind() or bundled_kind()
    print(f"server: {kind.name}", flush=True)
    server = start_server(kind)
    try:
        address = f"{HOST}:{server.port}"
        config = work / "pools.toml"
        config.write_text(pools_toml(address, args.sleepers, work))
        port, log = free_port(), work / "cmdstalk.log"
        client: greenstalk.Client[str] = greenstalk.Client((HOST, server.port), use="busy")
        with supervisor(config, port, log) as ps:
            workers = args.sleepers + len(FLOODS)

            def waiting() -> bool:
                busy = tube_stat(client, "busy", "current-waiting")
                return busy >= workers and tube_stat(client, "probe", "current-waiting") >= 1

            wait_for("every worker waiting", waiting, ps, log, READY_TIMEOUT)
            print(f"{workers + 1} workers waiting; starting {args.sleepers} sleepers",
                  flush=True)  # fmt: skip
            for _ in range(args.sleepers):
                client.put("sleep", ttr=LONG_TTR)
            # Reserved is not running yet: the spawns come after the reservations.
            wait_for("every sleeper running", lambda: sleeping(ps) >= args.sleepers, ps, log,
                     READY_TIMEOUT)  # fmt: skip
            time.sleep(args.settle)
            return rounds(args, work, client, server.port, ps, port, log)
    finally:
        server.stop()


def rounds(args: argparse.Namespace, work: Path, client: greenstalk.Client[str],
           server_port: int, ps: psutil.Process, port: int,
           log: Path) -> tuple[Condition, Condition]:  # fmt: skip
    """Every round of both conditions, their order alternating."""
    quiet, floods = Condition("quiet"), Condition("floods")
    prober: greenstalk.Client[str] = greenstalk.Client((HOST, server_port), use="probe")
    probe, lag = Probe(prober, work / "starts", args.gap), LagWatch(port)
    try:
        for r in range(args.rounds):
            print(f"round {r + 1} of {args.rounds}", flush=True)
            for which in ("quiet", "floods") if r % 2 == 0 else ("floods", "quiet"):
                if which == "quiet":
                    run_condition(which, quiet, probe, args.probes, ps, lag, log)
                    continue
                lag.samples = floods.start_lag_s  # the settle: the floods' first burst
                with flooding(client, args.sleepers, work, args.settle, floods):
                    run_condition(which, floods, probe, args.probes, ps, lag, log)
        return quiet, floods
    finally:
        lag.close()
        probe.close()
        prober.close()


def report(quiet: Condition, floods: Condition, sleepers: int) -> bool:
    """Print the table; whether the target was met."""
    print(f"\nresponsiveness: {sleepers} commands running; put to start on an idle tube")
    print(f"{'condition':<10} {'probes':>6} {'late':>4} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7} {'lag max ms':>10} {'lag p50 ms':>10} "
          f"{'warned':>6} {'cpu %':>6} {'wait %':>6}")  # fmt: skip
    for c in (quiet, floods):
        lags = c.lag_samples_s or [float("nan")]
        print(f"{c.name:<10} {len(c.latencies_ms):>6} {c.unstarted:>4} "
              f"{c.percentile(0.5):>7.1f} {c.percentile(0.95):>7.1f} "
              f"{c.percentile(0.99):>7.1f} {c.percentile(1.0):>7.1f} "
              f"{max(lags) * 1000:>10.1f} {statistics.median(lags) * 1000:>10.1f} "
              f"{c.warnings:>6} {c.cpu_percent:>6.1f} {c.waited_percent:>6.1f}")  # fmt: skip
    if floods.flood_seconds:
        rates = ", ".join(f"{name} {b / floods.flood_seconds / 2**20:.1f} MiB/s"
                          for name, b in floods.flood_bytes.items())  # fmt: skip
        print(f"floods written (yes on stdout: out; yes touch on the control channel: ctl): "
              f"{rates}")  # fmt: skip
    if floods.start_lag_s:
        print(f"floods starting (their first --settle seconds, left out above): the loop held "
              f"up to {max(floods.start_lag_s) * 1000:.1f} ms")  # fmt: skip
    ratio = floods.percentile(0.99) / quiet.percentile(0.99)
    met = ratio <= TARGET_RATIO and not floods.unstarted and not quiet.unstarted
    print(f"p99 floods / quiet: {ratio:.2f} (target <= {TARGET_RATIO:g}, every probe "
          f"started): {'PASS' if met else 'FAIL'}")  # fmt: skip
    print(
        "lag: cmdstalk_loop_lag_seconds, the longest the loop was held per heartbeat (1 s); "
        "warned: its 'event loop was held' log lines; cpu: the supervisor's, % of one core; "
        "wait: its loop thread runnable but waiting for a CPU, % of the time"
    )
    return met


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true",
                   help="20 sleepers, 2 rounds of 5 probes: a smoke run, not a figure")  # fmt: skip
    p.add_argument("--sleepers", type=int, default=None, help="commands running (500)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of both conditions (4)")
    p.add_argument("--probes", type=int, default=None, help="probes per condition and round (150)")
    p.add_argument("--gap", type=float, default=0.02, help="seconds between probes (jittered)")
    p.add_argument("--settle", type=float, default=None,
                   help="seconds after the sleepers or floods start (2; quick 0.5)")  # fmt: skip
    p.add_argument(
        "--keep", type=Path, default=None, help="work in this directory and keep its log"
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = p.parse_args(argv)
    quick = args.quick
    args.sleepers = args.sleepers if args.sleepers is not None else (20 if quick else 500)
    args.rounds = args.rounds or (2 if quick else 4)
    args.probes = args.probes or (5 if quick else 150)
    args.settle = args.settle if args.settle is not None else (0.5 if quick else 2.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="responsive-bench-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        try:
            quiet, floods = measure(args, work)
        except (ServerStartError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    met = report(quiet, floods, args.sleepers)
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
