#!/usr/bin/env python3
"""Benchmark the bundled server (cmdstalk-server) against the real beanstalkd.

Both servers run as subprocesses on 127.0.0.1 and free ports, in the same run, measured in
interleaved rounds so that background load on a shared machine hits both alike:

* pipelined puts on one connection (jobs/s),
* put → reserve → delete request/response cycles on 1 and on 16 connections (cycles/s),
* draining ready jobs with 4 connections (jobs/s),
* the server's CPU time per protocol command over those workloads (µs; the per-command
  cost of the bundled server's structure is guarded here, against beanstalkd's),
* resident memory per stored job (32-byte bodies),
* start-up time from Popen to the first accepted connection and to its first reply, idle,
  and to the first accepted connection with every core busy (``yes > /dev/null`` on
  each), against ``python -c pass`` in the same runs (benchmarks/server_startup.py
  measures start-up alone, with greenstalk's timing rule).

``--durable`` measures the binlog modes instead (``-b DIR -f 50`` and ``-f 0``) plus the
recovery time of a crashed server. ``--fairness`` measures another client's worst wait
while one client pipelines a burst of ``watch`` or ``reserve-with-timeout 0`` instead.
``--fairness`` also measures whether a command's CPU cost grows with the connection's
state (many tubes watched, many jobs reserved). ``--saturation`` shows that the load
generator saturates the real beanstalkd. Run
``python benchmarks/server.py --help`` for the options.

Exit status: 0 when every measurement ran (targets missed or not), 1 with ``--strict`` when
a target was missed, 2 when a server could not be started or answered wrongly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from server_loadgen import ProtocolError
from server_measure import (
    Sample,
    StartupSample,
    cycles,
    drain,
    memory_per_job,
    pipelined_puts,
)
from server_procs import (
    RunningServer,
    ServerKind,
    ServerStartError,
    beanstalkd_kind,
    bundled_kind,
    busy_cores,
    start_server,
    startup_seconds,
)
from server_report import BUNDLED, REAL, Figure, Goal, failures, table
from server_startup import compile_package, python_pass_seconds

#: Start-up targets: the bundled server within this many ``python -c pass`` times.
STARTUP_RATIO = 2.0
#: Protocol commands per operation of each throughput figure (a cycle is put, reserve,
#: delete; a drained job is reserve, delete).
COMMANDS_PER_OP = {
    "puts_pipelined_1conn": 1, "cycles_1conn": 3, "cycles_16conn": 3, "drain_4conn": 2,
}


@dataclass(frozen=True)
class Plan:
    """How much work each figure gets."""

    jobs: int  # pipelined puts per round, which are then the jobs drained
    cycle_seconds: float
    memory_jobs: int
    startup_runs: int
    rounds: int
    recovery_jobs: int
    durable_seconds: float


FULL = Plan(
    jobs=100_000, cycle_seconds=2.0, memory_jobs=500_000, startup_runs=20, rounds=3,
    recovery_jobs=1_000_000, durable_seconds=2.0,
)
QUICK = Plan(
    jobs=3_000, cycle_seconds=0.25, memory_jobs=5_000, startup_runs=3, rounds=1,
    recovery_jobs=5_000, durable_seconds=0.25,
)


def log(message: str) -> None:
    """Progress on stderr; the table goes to stdout."""
    print(message, file=sys.stderr, flush=True)


def bundled_unavailable(kind: ServerKind) -> str | None:
    """Why the bundled server cannot be benchmarked, or None when it starts and accepts."""
    try:
        start_server(kind, attempts=1).stop()
    except (ServerStartError, OSError) as exc:
        return str(exc).strip()
    return None


def choose_kinds(only: str | None) -> tuple[list[ServerKind], list[str]]:
    """The server kinds to measure, and notes on any left out."""
    kinds: list[ServerKind] = []
    notes: list[str] = []
    if only in (None, REAL):
        real = beanstalkd_kind()
        if real is None:
            raise ServerStartError("beanstalkd not found (install it or set BEANSTALKD_PATH)")
        kinds.append(real)
    if only in (None, BUNDLED):
        bundled = bundled_kind()
        reason = bundled_unavailable(bundled)
        if reason is None:
            kinds.append(bundled)
        elif only == BUNDLED:
            raise ServerStartError(f"bundled server unavailable: {reason}")
        else:
            notes.append(f"bundled server not measured (unavailable): {reason}")
    return kinds, notes


def _keep_best(figure: Figure, kind: str, sample: Sample) -> None:
    best = figure.samples.get(kind)
    if best is None or sample.value > best.value:
        figure.samples[kind] = sample
        figure.values[kind] = sample.value
    rounds = figure.details.setdefault(kind, [])
    assert isinstance(rounds, list)
    rounds.append(sample.as_dict())
    log(f"  {figure.label:<32} {kind:<10} {sample.value:>11,.0f} {figure.unit}"
        f"  (server cpu {sample.server_cpu:.0%}, busy {sample.server_demand:.0%},"
        f" loadgen cpu {sample.loadgen_cpu:.0%}, machine {sample.machine_busy:.0%})")


def throughput(servers: dict[str, RunningServer], plan: Plan) -> list[Figure]:
    """Puts, cycles ×1, cycles ×16 and drain, best of ``plan.rounds`` interleaved rounds."""
    puts = Figure("puts_pipelined_1conn", "pipelined puts, 1 conn", "jobs/s", Goal.THROUGHPUT)
    one = Figure("cycles_1conn", "put-reserve-delete, 1 conn", "cyc/s", Goal.THROUGHPUT,
                 latency_bound=True)
    many = Figure("cycles_16conn", "put-reserve-delete, 16 conns", "cyc/s", Goal.THROUGHPUT)
    drained = Figure("drain_4conn", f"drain {plan.jobs:,} jobs, 4 conns", "jobs/s",
                     Goal.THROUGHPUT)
    kinds = list(servers)
    for r in range(plan.rounds):
        log(f"round {r + 1}/{plan.rounds}")
        # Alternate who goes first, so a drift in background load favours neither.
        order = kinds if r % 2 == 0 else kinds[::-1]
        for kind in order:
            tube = f"bench-r{r}"
            _keep_best(puts, kind, pipelined_puts(servers[kind], tube, plan.jobs))
            _keep_best(drained, kind, drain(servers[kind], tube, plan.jobs))
        for kind in order:
            _keep_best(one, kind, cycles(servers[kind], f"bench-c1-{r}", 1, plan.cycle_seconds))
        for kind in order:
            sample = cycles(servers[kind], f"bench-c16-{r}", 16, plan.cycle_seconds)
            _keep_best(many, kind, sample)
    return [puts, one, many, drained, cpu_per_command([puts, one, many, drained])]


def cpu_per_command(workloads: list[Figure]) -> Figure:
    """The server's CPU time per protocol command, from every round of ``workloads``.

    Per workload: CPU seconds over commands, all rounds together; the figure is the
    geometric mean over the workloads, so that none weighs more for running more commands.
    """
    figure = Figure("cpu_per_command", "server CPU per command", "µs", Goal.CPU)
    kinds = set.intersection(*(set(w.details) for w in workloads))
    for kind in sorted(kinds):
        per_workload: dict[str, float] = {}
        for w in workloads:
            rounds = w.details[kind]
            assert isinstance(rounds, list)
            cpu = sum(r["server_run_seconds"] for r in rounds)
            commands = sum(r["ops"] for r in rounds) * COMMANDS_PER_OP[w.key]
            per_workload[w.key] = cpu / commands * 1e6
        figure.values[kind] = math.exp(
            sum(math.log(v) for v in per_workload.values()) / len(per_workload)
        )
        figure.details[kind] = per_workload
        log(f"  {figure.label:<32} {kind:<10} {figure.values[kind]:.2f} µs"
            f" ({', '.join(f'{k} {v:.2f}' for k, v in per_workload.items())})")
    return figure


def memory(kinds: list[ServerKind], plan: Plan) -> Figure:
    """RSS per stored job, each kind in a fresh process."""
    figure = Figure("memory_per_job", f"memory per job ({plan.memory_jobs:,} jobs)", "B/job",
                    Goal.MEMORY)
    for kind in kinds:
        sample = memory_per_job(kind, plan.memory_jobs)
        figure.values[kind.name] = sample.per_job
        figure.details[kind.name] = sample.as_dict()
        log(f"  memory {kind.name:<10} {sample.per_job:,.0f} B/job"
            f" (RSS {sample.rss_before / 2**20:.1f} -> {sample.rss_after / 2**20:.1f} MiB,"
            f" fill {sample.fill.value:,.0f} jobs/s)")
    return figure


def startup(kinds: list[ServerKind], plan: Plan) -> list[Figure]:
    """Median start-up times to the first accepted connection and to its first reply, then
    to the first accepted connection with every core busy; each against ``python -c pass``
    measured in the same runs (the floor of any Python server): within STARTUP_RATIO of it.
    """
    compile_package()  # as pip install does: no module compiled at each start
    runs, floor = _startup_runs(kinds, plan)
    with busy_cores():
        busy_runs, busy_floor = _startup_runs(kinds, plan)
    limit, busy_limit = STARTUP_RATIO * floor, STARTUP_RATIO * busy_floor
    log(f"  python -c pass median {floor * 1000:.1f} ms, cores busy {busy_floor * 1000:.1f} ms")
    accept = Figure("startup_accept", "start-up to first accept", "ms", Goal.LIMIT, limit=limit)
    reply = Figure("startup_reply", "start-up to first reply", "ms", Goal.LIMIT, limit=limit)
    busy = Figure("startup_accept_busy", "start-up to accept, cores busy", "ms", Goal.LIMIT,
                  limit=busy_limit)
    for name, pairs in runs.items():
        for figure, values in ((accept, [a for a, _ in pairs]), (reply, [r for _, r in pairs]),
                               (busy, [a for a, _ in busy_runs[name]])):
            sample = StartupSample(values)
            figure.values[name] = sample.median
            figure.details[name] = sample.as_dict()
            log(f"  {figure.label} {name:<10} median {sample.median * 1000:.1f} ms"
                f" (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})")
    return [accept, reply, busy]


def _startup_runs(kinds: list[ServerKind], plan: Plan) -> (
    tuple[dict[str, list[tuple[float, float]]], float]
):
    runs: dict[str, list[tuple[float, float]]] = {k.name: [] for k in kinds}
    python: list[float] = []
    for _ in range(plan.startup_runs):
        python.append(python_pass_seconds())
        for kind in kinds:  # interleaved, so load changes hit every kind alike
            runs[kind.name].append(startup_seconds(kind))
    return runs, statistics.median(python)


def in_memory_suite(kinds: list[ServerKind], plan: Plan, profile: Path | None = None) -> (
    list[Figure]
):
    """The default run: throughput rounds on long-lived servers, then memory and start-up.

    With ``profile``, the bundled server of the throughput rounds runs under cProfile and
    writes its statistics there (its figures are then slowed down by the profiler).
    """
    servers: dict[str, RunningServer] = {}
    try:
        for kind in kinds:
            run_kind = profiled(kind, profile) if profile and kind.name == BUNDLED else kind
            servers[kind.name] = start_server(run_kind)
        figures = throughput(servers, plan)
    finally:
        for server in servers.values():
            server.stop()
    return [*figures, memory(kinds, plan), *startup(kinds, plan)]


def profiled(kind: ServerKind, out: Path) -> ServerKind:
    """The bundled server under ``python -m cProfile -o OUT``."""
    return ServerKind(kind.name, (sys.executable, "-m", "cProfile", "-o", str(out), "-m",
                                  "cmdstalk_py.server"))


def profile_summary(path: Path, lines: int = 25) -> str:
    """The functions with the most own time in a cProfile output file."""
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(str(path), stream=out).sort_stats("tottime").print_stats(lines)
    return out.getvalue()


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        return ""


def metadata(args: argparse.Namespace, kinds: list[ServerKind]) -> dict[str, object]:
    """Where and how the figures were taken."""
    return {
        "argv": sys.argv[1:], "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
        "python": platform.python_version(), "commit": _git("rev-parse", "--short", "HEAD"),
        # Uncommitted changes to the server mean the commit alone does not say what ran.
        "server_tree_dirty": bool(_git("status", "--porcelain", "--", "../cmdstalk_py/server")),
        "servers": {k.name: list(k.argv_prefix) for k in kinds}, "quick": args.quick,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/server.py",
        description="Benchmark cmdstalk-server against the real beanstalkd.",
    )
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--only", choices=[REAL, BUNDLED], help="measure one server only")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also save results as JSON")
    parser.add_argument("--rounds", type=int, help="throughput rounds (best is kept)")
    parser.add_argument("--durable", action="store_true",
                        help="binlog modes (-b DIR -f 50, -f 0) and recovery time instead")
    parser.add_argument("--binlog-root", type=Path, metavar="DIR",
                        help="where --durable makes its binlog directories (default: $TMPDIR)")
    parser.add_argument("--recovery-jobs", type=int, help="jobs in the log for recovery time")
    parser.add_argument("--fairness", action="store_true",
                        help="another client's worst wait during pipelined bursts instead")
    parser.add_argument("--saturation", action="store_true",
                        help="show that the load generator saturates the real beanstalkd")
    parser.add_argument("--profile", type=Path, metavar="PATH",
                        help="run the bundled server of the throughput rounds under cProfile,"
                        " save the stats to PATH and print the top functions")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else FULL
    changes: dict[str, int] = {}
    if args.rounds:
        changes["rounds"] = args.rounds
    if args.recovery_jobs:
        changes["recovery_jobs"] = args.recovery_jobs
    return Plan(**{**plan.__dict__, **changes})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    started = time.monotonic()
    errors: list[str] = []
    figures: list[Figure] = []
    try:
        kinds, notes = choose_kinds(args.only)
        if args.saturation:
            from server_saturation import saturation

            print(saturation(kinds[0], plan))
            return 0
        if args.fairness:
            from server_fairness import (
                BURSTS,
                QUICK_BURSTS,
                QUICK_SCALING,
                SCALING,
                fairness_suite,
                scaling_suite,
            )

            figures = fairness_suite(kinds, QUICK_BURSTS if args.quick else BURSTS)
            figures += scaling_suite(kinds, QUICK_SCALING if args.quick else SCALING)
            title = "Fairness under pipelining: bundled vs real beanstalkd"
        elif args.durable:
            from server_durable import durable_suite

            figures, errors = durable_suite(kinds, plan, args.binlog_root)
            title = "Durable modes (binlog): bundled vs real beanstalkd"
        else:
            figures = in_memory_suite(kinds, plan, args.profile)
            title = "In-memory: bundled cmdstalk-server vs real beanstalkd"
            if args.profile:
                title += " (bundled throughput under cProfile)"
    except (ServerStartError, ProtocolError, OSError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    print(table(figures, f"{title} ({elapsed:.0f} s, {os.cpu_count()} CPUs,"
                         f" load {os.getloadavg()[0]:.1f})"))
    for note in [*notes, *errors]:
        print(f"NOTE {note}")
    missed = failures(figures)
    if missed:
        print("targets missed: " + "; ".join(missed))
    if args.profile and args.profile.exists():
        print(f"\ncProfile of the bundled server during the throughput rounds ({args.profile}):")
        print(profile_summary(args.profile))
    if args.json:
        report = {"meta": metadata(args, kinds), "elapsed": elapsed,
                  "figures": [f.as_dict() for f in figures], "notes": notes, "errors": errors}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if errors:
        return 2
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())

