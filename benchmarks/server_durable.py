"""Durable modes for benchmarks/server.py (``--durable``, issue 5).

Both servers get the same binlog flags: ``-b DIR -f 50`` (fsync at most every 50 ms) and
``-b DIR -f 0`` (fsync before acknowledging every change). Figures: pipelined puts (for a
fixed time, since ``-f 0`` speed depends on the disk) and put → reserve → delete cycles on 1
and 16 connections, best of the rounds, the cycles on a second pair of servers started
empty (the puts leave each server holding a different number of jobs); then the recovery
time of a server killed with SIGKILL holding ``recovery_jobs`` jobs in its log.

A bundled server that refuses ``-b`` is reported as an error (exit status 2), never silently
measured in memory.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from server_loadgen import ProtocolError, open_connection, stats
from server_measure import Sample, cycles, pipelined_puts, run_measured
from server_procs import (
    HOST,
    RunningServer,
    ServerKind,
    ServerStartError,
    free_port,
    start_server,
)
from server_report import BUNDLED, Figure, Goal
from server_workers import PutTask

FSYNC_MODES = ("50", "0")
RECOVERY_LIMIT = 10.0
RECOVERY_TIMEOUT = 300.0
RECOVERY_TUBE = "bench-recovery"
# Outstanding puts for durable runs: deep enough that -f 0 servers can group commits.
DURABLE_PUT_WINDOW = 2000


class _Plan(Protocol):
    @property
    def rounds(self) -> int: ...

    @property
    def cycle_seconds(self) -> float: ...

    @property
    def durable_seconds(self) -> float: ...

    @property
    def recovery_jobs(self) -> int: ...


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _keep_best(figure: Figure, kind: str, sample: Sample) -> None:
    if kind not in figure.samples or sample.value > figure.samples[kind].value:
        figure.samples[kind] = sample
        figure.values[kind] = sample.value
    rounds = figure.details.setdefault(kind, [])
    assert isinstance(rounds, list)
    rounds.append(sample.as_dict())
    _log(f"  {figure.label:<34} {kind:<10} {sample.value:>11,.0f} {figure.unit}"
         f"  (server cpu {sample.server_cpu:.0%}, busy {sample.server_demand:.0%})")


def _start_durable(kind: ServerKind, binlog: Path, fsync: str, errors: list[str]) -> (
    RunningServer | None
):
    """Start ``kind`` with a binlog; a bundled refusal is recorded, a real one raised."""
    try:
        return start_server(kind, ["-b", str(binlog), "-f", fsync])
    except ServerStartError as exc:
        if kind.name != BUNDLED:
            raise
        errors.append(f"bundled server refused -b {binlog} -f {fsync}: {exc}")
        _log(f"  ERROR {errors[-1]}")
        return None


@contextlib.contextmanager
def _durable_servers(kinds: list[ServerKind], root: Path, fsync: str,
                     errors: list[str]) -> Iterator[dict[str, RunningServer]]:
    """One durable server per kind, each with a fresh binlog directory under ``root``."""
    servers: dict[str, RunningServer] = {}
    try:
        for kind in kinds:
            binlog = root / kind.name
            binlog.mkdir(parents=True)
            server = _start_durable(kind, binlog, fsync, errors)
            if server is not None:
                servers[kind.name] = server
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _fsync_mode(kinds: list[ServerKind], plan: _Plan, root: Path, fsync: str,
                errors: list[str]) -> list[Figure]:
    puts = Figure(f"durable_puts_f{fsync}", f"durable -f {fsync}: pipelined puts", "jobs/s",
                  Goal.THROUGHPUT, check_saturation=False)
    one = Figure(f"durable_cycles_1conn_f{fsync}", f"durable -f {fsync}: cycles, 1 conn",
                 "cyc/s", Goal.THROUGHPUT, latency_bound=True, check_saturation=False)
    many = Figure(f"durable_cycles_16conn_f{fsync}", f"durable -f {fsync}: cycles, 16 conns",
                  "cyc/s", Goal.THROUGHPUT, check_saturation=False)
    workdir = Path(tempfile.mkdtemp(prefix="bench-binlog-", dir=root))
    try:
        # Puts run for a fixed time, so a faster server ends up holding (and logging) many
        # more jobs: under -f 0 the bundled server stores ~14 times as many. The cycle
        # figures therefore get their own servers, started empty like the in-memory
        # suite's (whose puts are drained before its cycles), so both compare like with like.
        with _durable_servers(kinds, workdir / "puts", fsync, errors) as servers:
            names = list(servers)
            for r in range(plan.rounds):
                _log(f"-f {fsync}: puts, round {r + 1}/{plan.rounds}")
                for name in names if r % 2 == 0 else names[::-1]:
                    sample = run_measured(servers[name], [PutTask(
                        servers[name].address, f"bench-dp-{r}", sys.maxsize,
                        DURABLE_PUT_WINDOW, plan.durable_seconds)])
                    _keep_best(puts, name, sample)
        with _durable_servers(kinds, workdir / "cycles", fsync, errors) as servers:
            names = list(servers)
            for r in range(plan.rounds):
                _log(f"-f {fsync}: cycles, round {r + 1}/{plan.rounds}")
                order = names if r % 2 == 0 else names[::-1]
                for name in order:
                    _keep_best(one, name, cycles(servers[name], "bench-dc1", 1,
                                                 plan.cycle_seconds))
                for name in order:
                    _keep_best(many, name, cycles(servers[name], "bench-dc16", 16,
                                                  plan.cycle_seconds))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return [puts, one, many]


def _ready_jobs_when_serving(port: int) -> int | None:
    """``current-jobs-ready`` of the recovery tube once the server answers, else None."""
    try:
        sock = open_connection((HOST, port), "bench-probe")
    except (OSError, ProtocolError):
        return None
    try:
        return int(stats(sock, b"stats-tube %s\r\n" % RECOVERY_TUBE.encode())
                   ["current-jobs-ready"])
    except ProtocolError as exc:
        if "NOT_FOUND" in str(exc):
            return 0
        raise
    except OSError:
        return None
    finally:
        sock.close()


def recovery_seconds(kind: ServerKind, jobs: int, root: Path) -> dict[str, float]:
    """Fill a durable server with ``jobs`` jobs, SIGKILL it, time its restart until it serves
    every job again (Popen to the first stats reply that shows them all)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-recovery-{kind.name}-", dir=root))
    extra = ["-b", str(workdir), "-f", "50"]
    try:
        server = start_server(kind, extra)
        try:
            fill = pipelined_puts(server, RECOVERY_TUBE, jobs, window=4000)
        finally:
            server.stop(signal.SIGKILL)  # a crash: nothing gets flushed on the way out
        log_bytes = sum(f.stat().st_size for f in workdir.iterdir() if f.is_file())
        port = free_port()
        t0 = time.perf_counter()
        proc = subprocess.Popen(kind.argv(port, extra), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + RECOVERY_TIMEOUT
            seen: int | None = None
            while time.monotonic() < deadline and proc.poll() is None:
                # beanstalkd listens before it replays its log: a connection is accepted
                # early and its replies wait until recovery is done, which is the moment
                # measured here. A server answering with fewer jobs is polled again.
                seen = _ready_jobs_when_serving(port)
                if seen == jobs:
                    return {"seconds": time.perf_counter() - t0, "jobs": jobs,
                            "log_bytes": log_bytes, "fill_rate": fill.value}
                time.sleep(0.001)
            err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None \
                and proc.stderr else ""
            raise ServerStartError(f"{kind.name} did not recover {jobs} jobs (last {seen}) {err}")
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stderr:
                proc.stderr.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def durable_suite(kinds: Sequence[ServerKind], plan: _Plan, root: Path | None) -> (
    tuple[list[Figure], list[str]]
):
    """Every durable figure, and the errors (bundled refusing -b) to report."""
    base = root or Path(tempfile.gettempdir())
    errors: list[str] = []
    figures: list[Figure] = []
    for fsync in FSYNC_MODES:
        figures += _fsync_mode(list(kinds), plan, base, fsync, errors)
    recovery = Figure("recovery", f"recovery of {plan.recovery_jobs:,} jobs", "s", Goal.LIMIT,
                      limit=RECOVERY_LIMIT)
    refused = {BUNDLED} if any(e.startswith("bundled server refused") for e in errors) else set()
    for kind in kinds:
        if kind.name in refused:
            continue
        result = recovery_seconds(kind, plan.recovery_jobs, base)
        recovery.values[kind.name] = result["seconds"]
        recovery.details[kind.name] = result
        _log(f"  recovery {kind.name:<10} {result['seconds']:.2f} s"
             f" ({result['log_bytes'] / 2**20:.0f} MiB of log)")
    figures.append(recovery)
    return figures, errors

