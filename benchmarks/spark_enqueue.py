#!/usr/bin/env python3
"""Enqueue throughput: the ``beanstalkd`` Spark data source against the pipelined putter.

Small jobs (16-25 byte bodies) into the real beanstalkd on 127.0.0.1, each measurement on
a freshly started beanstalkd, in two Spark modes measured in the same run:

* ``local``: ``local[2]``, driver and tasks in one JVM on this machine;
* ``cluster``: a standalone cluster (a master and two 1-core workers on 127.0.0.1, started
  by ``tests/spark/cluster.py``'s launcher, the one the cluster tests use): tasks run in
  executors, each in its worker's own directory.

Each mode runs in a child process of its own (one SparkSession per process), in
interleaved rounds of three methods:

* ``spark data source``: ``write_jobs(df)`` with a 2-partition DataFrame that is cached and
  counted beforehand. The time covers the whole write as a user sees it: planning (the
  Python data source's planning workers), task scheduling, Arrow transfer from the JVM to
  the Python workers, the pipelined puts, every reply checked, and the commit. It excludes
  Spark session start-up, building the DataFrame, and the first write of the session (a
  2,000-job warm-up that pays the one-off planning-worker start; reported separately as
  "cold first write").
* ``putter``: the data source's pipelined putter (``cmdstalk_py.spark.putter.Putter``, on
  ``cmdstalk_py.client``) in one process, no Spark: the reference the ratios divide by.
* ``greenstalk loop``: one process, ``client.put(body)`` per job, one round trip each.

The table gives each method's best and median jobs/s per mode and the data source's ratio
to the putter: the median over rounds of data source / putter measured in the same round,
so drifting load on a shared machine hits both sides alike. Each measurement is checked:
the server's ``total-jobs`` must equal the job count. Target (issue 7): the data source
>= 50,000 jobs/s in local mode. Exit status 0 when everything was measured (1 with
``--strict`` if the target was missed), 2 when a measurement was wrong.

Usage: ``python benchmarks/spark_enqueue.py [--quick] [--modes local,cluster]
[--jobs N] [--rounds R] [--json FILE]``; ``--master M`` measures one mode in this process.
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
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def one_mode(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every method in rounds on ``args.master``, in this process; the samples."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from pyspark.sql import functions as F

    from cmdstalk_py.spark.datasource import write_jobs
    from cmdstalk_py.spark.session import spark_session

    n = args.jobs
    bodies = [body(i) for i in range(n)]
    samples: dict[str, list[float]] = {"spark data source": [], "putter": [], "greenstalk loop": []}
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
        print(f"load average before: {os.getloadavg()}", flush=True)

        def spark_write(address: str) -> None:
            summary = write_jobs(df, "bench", address)
            slowest = max(p.seconds for p in summary.partitions)
            in_tasks.append(slowest)
            print(f"    (slowest partition's puts took {slowest:.2f} s)", flush=True)

        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            runs: list[tuple[str, Callable[[str], None]]] = [
                ("spark data source", spark_write),
                ("putter", lambda a: putter_once(a, bodies)),
                ("greenstalk loop", lambda a: greenstalk_loop(a, bodies)),
            ]
            if r % 2:
                runs.reverse()  # alternate the order so drifting load hits all alike
            for name, run in runs:
                samples[name].append(measure(name, n, run))
    return {
        "master": args.master,
        "jobs": n,
        "samples": samples,
        "startup_s": startup,
        "cold_first_write_s": cold,
        "slowest_partition_s": in_tasks,
        "loadavg": os.getloadavg(),
    }


def run_child(args: argparse.Namespace, master: str, env: dict[str, str]) -> dict[str, Any]:
    """One mode measured by a child process of this script (one SparkSession each)."""
    with tempfile.TemporaryDirectory(prefix="spark-enqueue-") as tmp:
        out = Path(tmp) / "mode.json"
        cmd = [
            sys.executable, __file__, "--master", master, "--jobs", str(args.jobs),
            "--rounds", str(args.rounds), "--partitions", str(args.partitions),
            "--json", str(out),
        ]  # fmt: skip
        done = subprocess.run(cmd, env=env, check=False)
        if done.returncode != 0:
            print(f"ERROR: the {master} measurement exited {done.returncode}", file=sys.stderr)
            sys.exit(2)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def measure_modes(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each mode of ``args.modes`` in turn; the cluster runs only while it is measured."""
    from tests.spark.cluster import standalone_cluster

    results: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        print(f"== {mode} ==", flush=True)
        if mode == "local":
            results[mode] = run_child(args, "local[2]", dict(os.environ))
            continue
        with tempfile.TemporaryDirectory(prefix="spark-enqueue-cluster-") as root:
            t = time.perf_counter()
            with standalone_cluster(Path(root)) as cluster:
                print(f"cluster up in {time.perf_counter() - t:.1f} s: {cluster.master}")
                results[mode] = run_child(args, cluster.master, cluster.env())
    return results


def mode_name(master: str) -> str:
    return "local" if master.startswith("local") else "cluster"


def paired_ratio(samples: dict[str, list[float]]) -> float:
    """Median over rounds of data source / putter, both measured in the same round."""
    pairs = zip(samples["spark data source"], samples["putter"], strict=True)
    return statistics.median(ds / put for ds, put in pairs)


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print(f"\nload average after: {os.getloadavg()}")
    print(f"{'mode':<8} {'method':<18} {'best jobs/s':>12} {'median':>10} {'/ putter':>9}")
    for mode, result in results.items():
        samples: dict[str, list[float]] = result["samples"]
        for name, rates in samples.items():
            ratio = f"{paired_ratio(samples):.2f}x" if name == "spark data source" else ""
            print(
                f"{mode:<8} {name:<18} {max(rates):>12,.0f} "
                f"{statistics.median(rates):>10,.0f} {ratio:>9}"
            )
    for mode, result in results.items():
        print(
            f"{mode}: Spark start-up {result['startup_s']:.1f} s, cold first write "
            f"{result['cold_first_write_s']:.1f} s (not in the rates)"
        )
    print("/ putter: median over rounds of data source / putter in the same round")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--modes", default="local,cluster", help="comma-separated: local, cluster"
    )
    parser.add_argument("--master", help="measure this one master in this process")
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, 1 round")
    parser.add_argument("--json", type=Path, help="save every sample here")
    parser.add_argument("--strict", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 5_000, 1
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or set(args.modes) - {"local", "cluster"}:
        parser.error(f"--modes: local and/or cluster, not {','.join(args.modes)!r}")
    return args


def main() -> None:
    args = parse_args()
    results = {mode_name(args.master): one_mode(args)} if args.master else measure_modes(args)
    print_table(results)
    if args.json:
        saved = results[mode_name(args.master)] if args.master else results
        args.json.write_text(json.dumps(saved, indent=2))
    local = next((r for r in results.values() if str(r["master"]).startswith("local")), None)
    if local is None:
        return
    best = max(local["samples"]["spark data source"])
    verdict = "PASS" if best >= TARGET else "FAIL"
    print(f"target data source (local) >= {TARGET:,.0f} jobs/s: {verdict} ({best:,.0f})")
    if args.strict and verdict == "FAIL":
        sys.exit(1)


if __name__ == "__main__":
    main()
