#!/usr/bin/env python3
"""Enqueue throughput: the ``beanstalkd`` Spark data source against a plain greenstalk loop.

200,000 small jobs (16-25 byte bodies) into the real beanstalkd on 127.0.0.1, in the same
run, in interleaved rounds, each measurement on a freshly started beanstalkd:

* ``spark data source``: ``write_jobs(df)`` on ``local[2]`` with a 2-partition DataFrame
  that is cached and counted beforehand. The time covers the whole write as a user sees it:
  planning (the Python data source's planning workers), task scheduling, Arrow transfer from
  the JVM to the Python workers, the pipelined puts, every reply checked, and the commit.
  It excludes Spark session start-up, building the DataFrame, and the first write of the
  session (a 2,000-job warm-up that pays the one-off planning-worker start; reported
  separately as "cold first write").
* ``greenstalk loop``: one process, ``client.put(body)`` per job, one round trip each.
* ``putter, 1 process`` (reference): the data source's pipelined putter without Spark.

Each measurement is checked: the server's ``total-jobs`` must equal the job count. Target
(issue 7): the data source ≥ 50,000 jobs/s. Exit status 0 when everything was measured
(1 with ``--strict`` if the target was missed), 2 when a measurement was wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import greenstalk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cmdstalk_py.spark.putter import Putter

TARGET = 50_000.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def beanstalkd() -> Iterator[str]:
    """A fresh real beanstalkd on a free port; its address."""
    binary = os.environ.get("BEANSTALKD_PATH") or shutil.which("beanstalkd")
    if binary is None:
        sys.exit("beanstalkd not found (set BEANSTALKD_PATH)")
    port = free_port()
    proc = subprocess.Popen([binary, "-l", "127.0.0.1", "-p", str(port)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit(f"beanstalkd did not start on port {port}")
                time.sleep(0.01)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def total_jobs(address: str) -> int:
    host, port = address.split(":")
    with greenstalk.Client((host, int(port))) as c:
        return int(c.stats()["total-jobs"])


def body(i: int) -> bytes:
    return b"job-%08d-%s" % (i, b"x" * (i % 10))


def greenstalk_loop(address: str, bodies: list[bytes]) -> None:
    host, port = address.split(":")
    with greenstalk.Client((host, int(port)), encoding=None, use="bench") as c:
        for b in bodies:
            c.put(b)


def putter_once(address: str, bodies: list[bytes]) -> None:
    with Putter(address, "bench") as put:
        put.put_batch(bodies)
        put.finish()


def measure(name: str, n: int, run: Callable[[str], None]) -> float:
    with beanstalkd() as address:
        started = time.perf_counter()
        run(address)
        seconds = time.perf_counter() - started
        got = total_jobs(address)
    if got != n:
        print(f"ERROR: {name}: server has {got} jobs, expected {n}", file=sys.stderr)
        sys.exit(2)
    rate = n / seconds
    print(f"  {name:<22} {n:>8} jobs in {seconds:6.2f} s = {rate:>9,.0f} jobs/s", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--quick", action="store_true", help="20,000 jobs, 1 round")
    parser.add_argument("--json", type=Path, help="save every sample here")
    parser.add_argument("--strict", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 20_000, 1
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")

    from pyspark.sql import functions as F

    from cmdstalk_py.spark.datasource import write_jobs
    from cmdstalk_py.spark.session import spark_session

    n = args.jobs
    bodies = [body(i) for i in range(n)]
    samples: dict[str, list[float]] = {"spark data source": [], "greenstalk loop": [], "putter": []}
    in_tasks: list[float] = []  # per data-source write: the slowest partition's put time
    t0 = time.perf_counter()
    with spark_session(args.master, "cmdstalk spark_enqueue benchmark") as spark:
        startup = time.perf_counter() - t0
        expr = F.encode(
            F.concat(
                F.lit("job-"),
                F.lpad(F.col("id").cast("string"), 8, "0"),
                F.lit("-"),
                F.repeat(F.lit("x"), (F.col("id") % 10).cast("int")),
            ),
            "UTF-8",
        )
        df = spark.range(n, numPartitions=args.partitions).select(expr.alias("body")).cache()
        assert df.count() == n
        warm = df.limit(2000).repartition(args.partitions)
        with beanstalkd() as address:
            t = time.perf_counter()
            write_jobs(warm, "warmup", address)
            cold = time.perf_counter() - t
        print(f"Spark start-up: {startup:.1f} s; cold first write (2,000 jobs): {cold:.1f} s")
        print(f"load average before: {os.getloadavg()}")

        def spark_write(address: str) -> None:
            summary = write_jobs(df, "bench", address)
            slowest = max(p.seconds for p in summary.partitions)
            in_tasks.append(slowest)
            print(f"    (slowest partition's puts took {slowest:.2f} s)", flush=True)

        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            runs: list[tuple[str, Callable[[str], None]]] = [
                ("spark data source", spark_write),
                ("greenstalk loop", lambda a: greenstalk_loop(a, bodies)),
                ("putter", lambda a: putter_once(a, bodies)),
            ]
            if r % 2:
                runs.reverse()  # alternate the order so drifting load hits all alike
            for name, run in runs:
                samples[name].append(measure(name, n, run))
    print(f"\nload average after: {os.getloadavg()}")
    print(f"{'method':<22} {'best jobs/s':>12} {'median':>10}")
    for name, rates in samples.items():
        print(f"{name:<22} {max(rates):>12,.0f} {statistics.median(rates):>10,.0f}")
    ds, gs = max(samples["spark data source"]), max(samples["greenstalk loop"])
    print(f"data source / greenstalk loop: {ds / gs:.1f}x")
    verdict = "PASS" if ds >= TARGET else "FAIL"
    print(f"target data source >= {TARGET:,.0f} jobs/s: {verdict} ({ds:,.0f})")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "jobs": n,
                    "samples": samples,
                    "startup_s": startup,
                    "cold_first_write_s": cold,
                    "slowest_partition_s": in_tasks,
                    "loadavg": os.getloadavg(),
                },
                indent=2,
            )
        )
    if args.strict and verdict == "FAIL":
        sys.exit(1)


if __name__ == "__main__":
    main()
