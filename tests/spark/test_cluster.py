"""The Spark commands on a real standalone cluster (master + two 1-core workers, 127.0.0.1).

Each test runs ``cmdstalk-spark --master spark://...`` as its own driver process; the
executors run in the workers' work directories, not in the driver's. Run with
``-m spark_cluster``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cmdstalk_py.ops.eventlog import encode_line, event_record
from cmdstalk_py.supervisor.results import JobResult, Outcome
from tests.helpers import running_beanstalkd
from tests.spark.cluster import Cluster
from tests.spark.rawjobs import drain_tube

pytestmark = [
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]
SCRIPT = Path(sys.executable).parent / "cmdstalk-spark"


def run_cli(
    cluster: Cluster, *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(SCRIPT), "--master", cluster.master, *args],
        capture_output=True, text=True, timeout=timeout, check=False, env=cluster.env(),
        cwd=cwd,
    )  # fmt: skip
    return out


def test_enqueue_on_the_cluster_is_exact(spark_cluster: Cluster, tmp_path: Path) -> None:
    n = 50_000
    bodies = [b"job-%d-" % i + b"\r\n\x00\xff"[: i % 5] for i in range(n)]
    pq.write_table(pa.table({"body": pa.array(bodies, pa.binary())}), tmp_path / "in.parquet")
    with running_beanstalkd() as server:
        out = run_cli(
            spark_cluster, "enqueue", str(tmp_path / "in.parquet"), "--tube", "exact",
            "--address", server.address, "--partitions", "2",
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"enqueued {n} jobs" in out.stdout, out.stdout
        assert Counter(drain_tube(server.address, "exact")) == Counter(bodies)


def test_deterministic_error_is_not_retried_on_the_cluster(
    spark_cluster: Cluster, tmp_path: Path
) -> None:
    rows = [{"body": "too big for the server" if i == 3000 else "x"} for i in range(4000)]
    src = tmp_path / "jobs.json"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running_beanstalkd("-z", "5") as server:
        out = run_cli(
            spark_cluster, "enqueue", str(src), "--format", "json", "--tube", "t",
            "--address", server.address,
        )  # fmt: skip
        text = out.stdout + out.stderr
        assert out.returncode == 1, text
        assert "JOB_TOO_BIG" in text and "row 3000" in text, text
        found = re.search(r"enqueued (\d+) jobs", text)
        assert found is not None, text
        held = int(server.client().stats_tube("t")["total-jobs"])
        assert int(found.group(1)) == held and 3000 <= held < 4000, text


def _events(path: Path, n: int) -> None:
    results = [
        JobResult(
            job_id=i, tube=f"t{i % 2}", slot=0, outcome=Outcome.DELETED, started_at=1.7e9 + i,
            ended_at=1.7e9 + i + 0.01, priority=1024, ttr=60, releases=0, timeouts=0,
            reserves=1, age_s=0, payload_bytes=3, exit_code=0,
        )
        for i in range(n)
    ]  # fmt: skip
    path.write_bytes(b"".join(encode_line(event_record(r, "h", 1)) for r in results))


def test_report_output_is_readable_on_the_driver(spark_cluster: Cluster, tmp_path: Path) -> None:
    import pandas as pd

    _events(tmp_path / "events.jsonl", 500)
    # A relative --out: executors used to resolve it in their own work directories.
    out = run_cli(spark_cluster, "report", "--events", "events.jsonl", "--out", "rep", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    events = pd.read_parquet(tmp_path / "rep" / "events")
    assert len(events) == 500 and set(events["tube"]) == {"t0", "t1"}
    assert len(pd.read_parquet(tmp_path / "rep" / "windows")) > 0


def test_spark_submit_master_is_honoured(spark_cluster: Cluster, tmp_path: Path) -> None:
    import pyspark

    import cmdstalk_py.spark.cli as cli

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    src = tmp_path / "jobs.json"
    src.write_text("".join(json.dumps({"body": f"s{i}"}) + "\n" for i in range(100)))
    with running_beanstalkd() as server:
        args = ["enqueue", str(src), "--format", "json", "--address", server.address]
        out = subprocess.run(
            [str(submit), "--master", spark_cluster.master, cli.__file__, *args],
            capture_output=True, text=True, timeout=300, check=False, env=spark_cluster.env(),
        )  # fmt: skip
        text = out.stdout + out.stderr
        assert out.returncode == 0, text
        assert f"starting Spark ({spark_cluster.master})" in text, text
        assert server.client().stats_tube("default")["total-jobs"] == 100
    apps = spark_cluster.state()["completedapps"]
    assert isinstance(apps, list) and any(a["name"] == "cmdstalk-spark enqueue" for a in apps)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_drain_on_the_cluster_with_a_relative_cmd(spark_cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "worker.sh").write_text('read -r body; echo "$body" >> done.txt\n')
    bodies = [f"job-{i}" for i in range(200)]
    with running_beanstalkd() as server:
        client = server.client(use="d")
        for body in bodies:
            client.put(body)
        out = run_cli(
            spark_cluster, "drain", "--address", server.address, "--tubes", "d",
            "--cmd", "sh worker.sh", "--idle-timeout", "2", "--events", "ev.jsonl",
            cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert "200 jobs" in out.stdout and "d: deleted 200" in out.stdout, out.stdout
        assert sorted((tmp_path / "done.txt").read_text().split()) == sorted(bodies)
        assert len((tmp_path / "ev.jsonl").read_bytes().splitlines()) == 200
        assert server.client().stats_tube("d")["current-jobs-ready"] == 0


def test_an_executor_killed_mid_drain_loses_no_result(
    spark_cluster: Cluster, tmp_path: Path
) -> None:
    import os
    import signal

    from tests.helpers import wait_until
    from tests.spark.cluster import executor_pids

    (tmp_path / "worker.sh").write_text('read -r body; sleep 1; echo "$body" >> done.txt\n')
    bodies = [f"job-{i}" for i in range(30)]
    with running_beanstalkd() as server:
        client = server.client(use="k")
        for body in bodies:
            client.put(body, ttr=5)
        proc = subprocess.Popen(
            [str(SCRIPT), "--master", spark_cluster.master, "drain", "--address",
             server.address, "--tubes", "k", "--cmd", "sh worker.sh", "--parallelism", "2",
             "--idle-timeout", "3", "--events", "ev.jsonl"],
            cwd=tmp_path, env=spark_cluster.env(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            events = tmp_path / "ev.jsonl"
            # Results are on the driver's disk as they happen, before any task ends.
            wait_until(
                lambda: events.exists() and len(events.read_bytes().splitlines()) >= 4,
                240, interval=0.2, message="first results streamed",
            )  # fmt: skip
            victim = executor_pids(spark_cluster)[0]
            commands = [p for p in _descendants(victim)]
            os.kill(victim, signal.SIGKILL)
            # The broker's commands die with their executor instead of running on.
            wait_until(lambda: not any(_alive(p) for p in commands), 30, message="orphans")
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, stdout + stderr
        lines = events.read_bytes().splitlines()
        found = re.search(r"^(\d+) jobs", stdout, re.M)
        assert found is not None and int(found.group(1)) == len(lines), stdout
        assert set((tmp_path / "done.txt").read_text().split()) == set(bodies)
        stats = server.client().stats_tube("k")
        assert (stats["current-jobs-ready"], stats["current-jobs-reserved"]) == (0, 0)
