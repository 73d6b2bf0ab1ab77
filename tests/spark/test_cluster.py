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
