#!/usr/bin/env python3
"""Drain throughput: ``cmdstalk-spark drain`` in local mode and on a standalone cluster
against the ``cmdstalk`` supervisor, in the same run.

Every measurement drains the same jobs (``--jobs`` small bodies, put pipelined into one
tube of a freshly started real beanstalkd on 127.0.0.1) with the same command (``--cmd``,
by default ``cat >/dev/null``), the same shell and the same number of brokers
(``--brokers``, by default 2), each until exactly ``--jobs`` jobs are done (``--max-jobs``
for both: no idle wait at the end):

* ``cmdstalk``: the supervisor CLI, ``--per-tube BROKERS``;
* ``spark local``: ``cmdstalk-spark --master local[BROKERS] drain --parallelism BROKERS``;
* ``spark cluster``: the same on a standalone cluster (a master and two 1-core workers on
  127.0.0.1, started once for the run by ``tests/spark/cluster.py``'s launcher, the one
  the cluster tests use); the brokers run in the executors.

Two figures per measurement:

* ``wall``: jobs over the wall time of the whole command, from its start to its exit:
  what a user waits for, start-up included (for Spark: the JVM, the SparkSession, the
  executors, the Python workers).
* ``busy``: jobs over the span from the first job started to the last job finished, from
  the event log each command writes (``--events``; millisecond timestamps): start-up
  and shut-down excluded.

Rounds alternate the order of the runners; ratios are to ``cmdstalk`` in the same round,
median over rounds, so load drifting on a shared machine hits both sides alike. Each
measurement is checked (the event log holds exactly ``--jobs`` lines, all deleted, and the
tube is empty); exit status 2 when one is wrong.

Usage: ``python benchmarks/spark_drain.py [--quick] [--jobs N] [--rounds R]
[--modes local,cluster] [--brokers B] [--cmd CMD] [--json FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cmdstalk_py.spark.putter import Putter  # noqa: E402
from tests.helpers import running_beanstalkd  # noqa: E402

BIN = Path(sys.executable).parent
TUBE = "bench"


@dataclass(frozen=True)
class Runner:
    """One way of draining: its name, its command line, and its environment."""

    name: str
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Sample:
    """One drain measured: jobs, wall seconds, first-start-to-last-end seconds."""

    runner: str
    jobs: int
    wall_s: float
    busy_s: float

    @property
    def wall_rate(self) -> float:
        return self.jobs / self.wall_s

    @property
    def busy_rate(self) -> float:
        return self.jobs / self.busy_s if self.busy_s > 0 else float("nan")


def runners(args: argparse.Namespace, cluster_master: str | None, cluster_env: dict[str, str]
            ) -> list[Runner]:  # fmt: skip
    """The command lines; ``{address}`` and ``{events}`` are filled in per measurement."""
    n, b = str(args.jobs), str(args.brokers)
    common = ["--address", "{address}", "--tubes", TUBE, "--cmd", args.cmd, "--max-jobs", n,
              "--events", "{events}"]  # fmt: skip
    spark = ["drain", *common, "--parallelism", b, "--idle-timeout", "1"]
    out = [Runner("cmdstalk", [str(BIN / "cmdstalk"), *common, "--per-tube", b], dict(os.environ))]
    if "local" in args.modes:
        argv = [str(BIN / "cmdstalk-spark"), "--master", f"local[{b}]", *spark]
        out.append(Runner("spark local", argv, dict(os.environ)))
    if cluster_master is not None:
        argv = [str(BIN / "cmdstalk-spark"), "--master", cluster_master, *spark]
        out.append(Runner("spark cluster", argv, cluster_env))
    return out


def _time(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def busy_span(events: Path, jobs: int) -> float:
    """First start to last end in the event log; exits 2 unless it shows ``jobs`` deletes."""
    records = [json.loads(line) for line in events.read_bytes().splitlines()]
    outcomes = Counter(r["outcome"] for r in records)
    if outcomes != Counter({"deleted": jobs}):
        sys.exit(f"ERROR: {events}: outcomes {dict(outcomes)}, expected {jobs} deleted")
    return max(_time(r["end"]) for r in records) - min(_time(r["start"]) for r in records)


def measure(runner: Runner, jobs: int, workdir: Path) -> Sample:
    """Put ``jobs`` jobs into a fresh beanstalkd, run ``runner`` until it exits."""
    bodies = [b"job-%08d" % i for i in range(jobs)]
    events = workdir / f"{runner.name.replace(' ', '-')}-{time.monotonic_ns()}.jsonl"
    with running_beanstalkd() as server:
        with Putter(server.address, TUBE) as put:
            put.put_batch(bodies)
            put.finish()
        argv = [a.format(address=server.address, events=events) for a in runner.argv]
        started = time.perf_counter()
        done = subprocess.run(argv, env=runner.env, cwd=workdir, capture_output=True, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
            sys.exit(f"ERROR: {runner.name} exited {done.returncode}:\n{tail}")
        # The server's own stats: an emptied, unwatched tube is gone from stats-tube.
        stats = server.client().stats()
        if (stats["current-jobs-ready"], stats["cmd-delete"]) != (0, jobs):
            sys.exit(f"ERROR: {runner.name} left the server with {stats}")
    sample = Sample(runner.name, jobs, wall, busy_span(events, jobs))
    print(
        f"  {runner.name:<14} {jobs:>6} jobs: wall {wall:6.2f} s = {sample.wall_rate:8,.1f} "
        f"jobs/s; busy {sample.busy_s:6.2f} s = {sample.busy_rate:8,.1f} jobs/s",
        flush=True,
    )
    return sample


def paired(samples: list[Sample], name: str, rate: str) -> float:
    """Median over rounds of ``name``'s rate / cmdstalk's, measured in the same round."""
    mine: list[float] = [getattr(s, rate) for s in samples if s.runner == name]
    ref: list[float] = [getattr(s, rate) for s in samples if s.runner == "cmdstalk"]
    return statistics.median(m / r for m, r in zip(mine, ref, strict=True))


def print_table(samples: list[Sample], names: list[str]) -> None:
    print(f"\nload average after: {os.getloadavg()}")
    head = ("runner", "wall jobs/s", "busy jobs/s", "wall / cmdstalk", "busy / cmdstalk",
            "wall - busy")  # fmt: skip
    print(f"{head[0]:<14} {head[1]:>12} {head[2]:>12} {head[3]:>16} {head[4]:>16} {head[5]:>12}")
    for name in names:
        mine = [s for s in samples if s.runner == name]
        wall = statistics.median(s.wall_rate for s in mine)
        busy = statistics.median(s.busy_rate for s in mine)
        ratios = ("", "")
        if name != "cmdstalk":
            ratios = (f"{paired(samples, name, 'wall_rate'):.2f}x",
                      f"{paired(samples, name, 'busy_rate'):.2f}x")  # fmt: skip
        overhead = statistics.median(s.wall_s - s.busy_s for s in mine)
        print(
            f"{name:<14} {wall:>12,.1f} {busy:>12,.1f} {ratios[0]:>16} {ratios[1]:>16} "
            f"{overhead:>10.2f} s"
        )
    print(
        "wall: whole command, start-up included; busy: first job started to last finished "
        "(event log); wall - busy: start-up and shut-down. Medians over rounds; ratios "
        "paired per round."
    )


def rounds(args: argparse.Namespace, todo: list[Runner], workdir: Path) -> list[Sample]:
    samples: list[Sample] = []
    print(f"load average before: {os.getloadavg()}", flush=True)
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", flush=True)
        order = todo if r % 2 == 0 else list(reversed(todo))
        samples.extend(measure(runner, args.jobs, workdir) for runner in order)
    return samples


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument("--cmd", default="cat >/dev/null")
    parser.add_argument("--modes", default="local,cluster", help="Spark modes: local, cluster")
    parser.add_argument("--quick", action="store_true", help="100 jobs, 1 round")
    parser.add_argument("--json", type=Path, help="save every sample here")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 100, 1
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(args.modes) - {"local", "cluster"}:
        parser.error(f"--modes: local and/or cluster, not {','.join(args.modes)!r}")
    return args


def main() -> None:
    args = parse_args()
    from tests.spark.cluster import standalone_cluster

    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-drain-")))
        master, env = None, dict(os.environ)
        if "cluster" in args.modes:
            t = time.perf_counter()
            (workdir / "cluster").mkdir()
            cluster = stack.enter_context(standalone_cluster(workdir / "cluster"))
            master, env = cluster.master, cluster.env()
            print(f"cluster up in {time.perf_counter() - t:.1f} s: {master}", flush=True)
        todo = runners(args, master, env)
        samples = rounds(args, todo, workdir)
    names = [r.name for r in todo]
    print_table(samples, names)
    if args.json:
        saved: dict[str, Any] = {
            "jobs": args.jobs,
            "brokers": args.brokers,
            "cmd": args.cmd,
            "samples": [
                {**asdict(s), "wall_rate": s.wall_rate, "busy_rate": s.busy_rate}
                for s in samples
            ],
            "loadavg": os.getloadavg(),
        }
        args.json.write_text(json.dumps(saved, indent=2))


if __name__ == "__main__":
    main()
