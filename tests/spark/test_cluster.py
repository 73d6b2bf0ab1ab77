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
            peak_memory_bytes=(i % 100 + 1) << 20, cpu_s=i / 100,
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
    # The jobs that cost most: 10 per tube by memory and 10 by CPU, the last job on top.
    costliest = pd.read_parquet(tmp_path / "rep" / "costliest")
    assert len(costliest) == 40 and set(costliest["by"]) == {"memory", "cpu"}
    top_cpu = costliest[(costliest["by"] == "cpu") & (costliest["rank"] == 1)]
    assert sorted(top_cpu["job_id"]) == [498, 499]


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


def _commands_of(pid: int) -> dict[int, int]:
    """The worker.sh commands running below ``pid``: process id -> their CMDSTALK_JOB_ID."""
    found = {}
    for child in _descendants(pid):
        try:
            cmdline = (Path("/proc") / str(child) / "cmdline").read_bytes()
            environ = (Path("/proc") / str(child) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ids = [e.removeprefix(b"CMDSTALK_JOB_ID=") for e in environ]
        job = next((i for i, e in zip(ids, environ, strict=True) if i != e), None)
        if b"worker.sh" in cmdline and job is not None:
            found[child] = int(job)
    return found


# Each run records its job and the server's reservation count before its 2 s of work, and
# its body once the work is done.
RECORDING_WORKER = """read -r body
echo "$CMDSTALK_JOB_ID $CMDSTALK_RESERVES" >> runs.txt
sleep 2
echo "$body" >> done.txt
"""


def _kill_mid_command(cluster: Cluster, runs: Path) -> set[int]:
    """SIGKILL an executor just after one of its commands started and recorded its run in
    ``runs`` (it has ~2 s left, so the job is certainly held, not finished); the jobs its
    commands were running."""
    import os
    import signal

    from tests.helpers import wait_until
    from tests.spark.cluster import executor_pids

    victim = wait_until(lambda: executor_pids(cluster), 240, message="an executor")[0]
    seen = set(_commands_of(victim))
    fresh = wait_until(
        lambda: {p: j for p, j in _commands_of(victim).items() if p not in seen},
        60, interval=0.02, message="a command starting on the victim",
    )  # fmt: skip

    def recorded() -> bool:
        # The process exists before it has read its body and written its line: killed
        # in between, its run would leave no record to count.
        lines = runs.read_text().splitlines() if runs.exists() else []
        return set(fresh.values()) <= {int(line.split()[0]) for line in lines}

    wait_until(recorded, 60, interval=0.01, message="the command's run recorded")
    os.kill(victim, signal.SIGKILL)
    # The broker's commands die with their executor instead of running on.
    wait_until(lambda: not any(_alive(p) for p in fresh), 120, message="orphans")
    return set(fresh.values())


def test_an_executor_killed_mid_drain_loses_no_result(
    spark_cluster: Cluster, tmp_path: Path
) -> None:
    """Exactly the job the killed executor held runs twice, and the server agrees: its
    second reservation is the one its counters cannot explain by a release or a timeout,
    or an explicit release by the dying broker. Every job completes exactly once."""
    from tests.helpers import wait_until

    (tmp_path / "worker.sh").write_text(RECORDING_WORKER)
    n = 30
    bodies = [f"job-{i}" for i in range(n)]
    with running_beanstalkd() as server:
        client = server.client(use="k")
        for body in bodies:
            client.put(body, ttr=10)
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
                lambda: events.exists() and len(events.read_bytes().splitlines()) >= 2,
                240, interval=0.2, message="first results streamed",
            )  # fmt: skip
            held = _kill_mid_command(spark_cluster, tmp_path / "runs.txt")
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, stdout + stderr
        server_stats = server.client().stats()
    assert len(held) == 1, held  # one broker per task, one job at a time
    records = [json.loads(line) for line in events.read_bytes().splitlines()]
    found = re.search(r"^(\d+) jobs", stdout, re.M)
    assert found is not None and int(found.group(1)) == len(records), stdout
    deleted = {r["job_id"]: r for r in records if r["outcome"] == "deleted"}
    assert len(deleted) == n == sum(r["outcome"] == "deleted" for r in records), records
    # A line from the dying broker, if it got one out, is the held job's release.
    others = [r for r in records if r["outcome"] != "deleted"]
    assert all(r["job_id"] in held and r["outcome"] == "shutdown_released" for r in others)
    lines = (tmp_path / "runs.txt").read_text().splitlines()
    runs = Counter(int(line.split()[0]) for line in lines)
    assert {job for job, count in runs.items() if count == 2} == held, runs
    assert set(runs.values()) <= {1, 2} and set(runs) == set(deleted), runs
    # The server's view: one reservation per run, and the extra ones are exactly the
    # jobs the killed executor held.
    assert all(runs[job] == r["reserves"] for job, r in deleted.items()), (runs, deleted)
    assert sum(r["reserves"] - 1 for r in deleted.values()) == len(held)
    assert all(r["timeouts"] == 0 for r in deleted.values())
    assert all(r["releases"] == 0 for job, r in deleted.items() if job not in held)
    # The held job came back by the dying broker's release (releases 1) or by its
    # connection closing (releases 0): the one reservation no counter explains.
    released = [r for r in others if r["outcome"] == "shutdown_released"]
    for job in held:
        assert deleted[job]["releases"] in ({1} if released else {0, 1}), deleted[job]
    assert (server_stats["cmd-delete"], server_stats["current-jobs-ready"]) == (n, 0)
    assert (server_stats["current-jobs-reserved"], server_stats["job-timeouts"]) == (0, 0)
    # The held job's first run was killed before its work was done: completed exactly once.
    assert Counter((tmp_path / "done.txt").read_text().split()) == Counter(bodies)
