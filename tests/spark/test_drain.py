"""`cmdstalk-spark drain`: brokers as Spark tasks treat every job as cmdstalk would."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from cmdstalk_py.spark.drain import BrokerSpec, plan_brokers
from tests.helpers import BeanstalkServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The job body says what the command does: ok exits 0, retry 1, bury 3, slow overruns.
CMD = (
    'read -r kind; case "$kind" in '
    "ok*) exit 0;; retry*) exit 1;; bury*) exit 3;; slow*) sleep 30;; esac"
)


def test_plan_brokers_spreads_tubes_tasks_and_max_jobs() -> None:
    assert plan_brokers(("a", "b"), 2, None) == [
        [BrokerSpec("a", 0, None)],
        [BrokerSpec("b", 0, None)],
    ]
    # More tubes than tasks: every tube still gets a broker.
    assert plan_brokers(("a", "b", "c"), 2, None) == [
        [BrokerSpec("a", 0, None), BrokerSpec("c", 0, None)],
        [BrokerSpec("b", 0, None)],
    ]
    # --max-jobs split evenly; brokers with no share are left out.
    plan = plan_brokers(("a",), 4, 6)
    assert [s.max_jobs for t in plan for s in t] == [2, 2, 1, 1]
    assert [s.slot for t in plan for s in t] == [0, 1, 2, 3]
    assert sum(len(t) for t in plan_brokers(("a",), 4, 2)) == 2
    with pytest.raises(ValueError):
        plan_brokers((), 2, None)


@pytest.mark.spark
def test_drain_handles_every_job_like_cmdstalk(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main
    from cmdstalk_py.spark.eventlog import read_events

    t1 = beanstalk.client(use="t1")
    for i in range(6):
        t1.put(f"ok {i}")
    for i in range(2):
        t1.put(f"retry {i}")
    t2 = beanstalk.client(use="t2")
    for i in range(4):
        t2.put(f"ok {i}")
    for i in range(2):
        t2.put(f"bury {i}")
    t2.put("slow", ttr=2)
    events = tmp_path / "drain.jsonl"
    run = CliRunner().invoke(
        main,
        [
            "drain",
            "--address",
            beanstalk.address,
            "--tubes",
            "t1,t2",
            "--cmd",
            CMD,
            "--parallelism",
            "2",
            "--idle-timeout",
            "3",
            "--max-releases",
            "2",
            "--bury-exit-codes",
            "3",
            "--events",
            str(events),
        ],
    )
    assert run.exit_code == 0, run.output
    records = [json.loads(line) for line in events.read_text().splitlines()]
    # One row per handled job: retries come back (delay 0, then 1 s) and are buried unrun
    # when reserved with 2 releases; exit 3 buries; the slow job is killed before its TTR
    # and buried.
    assert Counter((r["tube"], r["outcome"]) for r in records) == {
        ("t1", "deleted"): 6,
        ("t1", "released"): 4,
        ("t1", "precheck_buried"): 2,
        ("t2", "deleted"): 4,
        ("t2", "buried"): 2,
        ("t2", "timeout_buried"): 1,
    }
    releases = sorted(
        (r["releases"], r["release_delay"]) for r in records if r["outcome"] == "released"
    )
    assert releases == [(0, 0), (0, 0), (1, 1), (1, 1)]
    slow = next(r for r in records if r["outcome"] == "timeout_buried")
    assert slow["signal"] in ("SIGTERM", "SIGKILL") and slow["duration_ms"] < 2000
    assert "19 jobs" in run.output and "t1: deleted 6, precheck_buried 2, released 4" in run.output
    # The brokers' warnings reach the driver as the supervisor writes them: time, level,
    # tube and slot, job id; never a bare message.
    warned = re.findall(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING \[t1:\d+\] job (\d+) "
        r"buried without running by max_releases \(releases=2,",
        run.output,
    )
    unrun = sorted(r["job_id"] for r in records if r["outcome"] == "precheck_buried")
    assert sorted(int(job) for job in warned) == unrun, run.output
    bare = [ln for ln in run.output.splitlines() if ln.startswith("buried without running")]
    assert not bare, run.output
    # The server agrees: only the buried jobs are left.
    stats = {t: beanstalk.client().stats_tube(t) for t in ("t1", "t2")}
    assert [(s["current-jobs-ready"], s["current-jobs-buried"]) for s in stats.values()] == [
        (0, 2),
        (0, 3),
    ]
    log = read_events(spark, str(events))
    assert (log.events.count(), log.rejected.count()) == (19, 0)  # the report's schema
    log.release()


@pytest.mark.spark
def test_drain_stops_at_max_jobs(spark: SparkSession, beanstalk: BeanstalkServer) -> None:
    from cmdstalk_py.spark.drain import drain
    from cmdstalk_py.supervisor.config import Config

    client = beanstalk.client(use="many")
    for i in range(12):
        client.put(f"ok {i}")
    config = Config(cmd="cat >/dev/null", host=beanstalk.host, port=beanstalk.port, tubes=("many",))
    summary = drain(spark, config, 2, max_jobs=5, idle_timeout=2)
    assert summary.jobs == 5 and summary.outcomes == {("many", "deleted"): 5}
    assert beanstalk.client().stats_tube("many")["current-jobs-ready"] == 7


def test_brokers_follow_the_backlog() -> None:
    from cmdstalk_py.spark.drain import broker_shares

    # --parallelism 2 over 3 tubes: the big tube gets two brokers, the others one each.
    assert broker_shares(("a", "b", "big"), 2, {"a": 10, "b": 10, "big": 1000}) == {
        "a": 1,
        "b": 1,
        "big": 2,
    }
    plan = plan_brokers(("a", "b", "big"), 2, None, {"a": 10, "b": 10, "big": 1000})
    assert sorted(len([s for s in t if s.tube == "big"]) for t in plan) == [1, 1]
    assert broker_shares(("a", "b"), 4, {}) == {"a": 2, "b": 2}


@pytest.mark.spark
def test_drain_runs_commands_in_cwd_with_the_drivers_environment(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main

    work = tmp_path / "app"
    work.mkdir()
    (work / "worker.sh").write_text(
        'read -r body; echo "$body $PWD ${FROM_DRIVER-} ${OMP_NUM_THREADS-unset}" >> seen\n'
        "sleep 0.5\n"
    )
    client = beanstalk.client(use="env")
    for i in range(8):
        client.put(f"job{i}")
    args = ["drain", "--address", beanstalk.address, "--tubes", "env", "--cmd", "sh worker.sh"]
    args += ["--cwd", str(work), "--idle-timeout", "1", "--events", str(tmp_path / "ev.jsonl")]
    run = CliRunner(env={"FROM_DRIVER": "yes"}).invoke(main, args)
    assert run.exit_code == 0, run.output
    lines = sorted((work / "seen").read_text().splitlines())
    assert lines == [f"job{i} {work} yes unset" for i in range(8)], lines
    assert "env: " in run.output and "done" in run.output  # progress from the driver
