"""`cmdstalk-spark enqueue` and `drain` over several servers (issue #18, item 5)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from cmdstalk_py.spark.servers import parse_servers, server_for
from tests.helpers import BeanstalkServer, free_port, running_beanstalkd, wait_until
from tests.spark.rawjobs import drain_tube

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def two_servers() -> Iterator[tuple[BeanstalkServer, BeanstalkServer]]:
    """Two real beanstalkd processes on free ports, stopped in finally."""
    with ExitStack() as stack:
        a = stack.enter_context(running_beanstalkd())
        b = stack.enter_context(running_beanstalkd())
        yield a, b


def test_parse_servers_and_the_round_robin() -> None:
    assert parse_servers("a:1, b:2,a:1,") == ("a:1", "b:2")
    assert parse_servers(["a:1", "b"]) == ("a:1", "b:11300")
    assert parse_servers("[::1]:5") == ("[::1]:5",)
    for bad in ("", " , ", "a:x", "a:1,b:"):
        with pytest.raises(ValueError):
            parse_servers(bad)
    with pytest.raises(ValueError):
        parse_servers(["a:1,b:2"])
    servers = ("a:1", "b:2", "c:3")
    assert [server_for(servers, p) for p in range(-1, 5)] == [
        "a:1", "a:1", "b:2", "c:3", "a:1", "b:2",
    ]  # fmt: skip


@pytest.mark.spark
def test_enqueue_spreads_rows_over_two_servers(
    spark: SparkSession, two_servers: tuple[BeanstalkServer, BeanstalkServer]
) -> None:
    from pyspark.sql import functions as F

    from cmdstalk_py.spark.datasource import write_jobs

    a, b = two_servers
    n = 10_000
    df = spark.range(n, numPartitions=4).select(
        F.concat(F.lit("job-"), F.col("id").cast("string")).alias("body")
    )
    summary = write_jobs(df, "spread", f"{a.address},{b.address}")
    assert summary.rows == n
    # Partitions 0 and 2 wrote to the first server, 1 and 3 to the second.
    assert [p.server for p in summary.partitions] == [a.address, b.address] * 2
    assert summary.per_server == {
        a.address: summary.partitions[0].rows + summary.partitions[2].rows,
        b.address: summary.partitions[1].rows + summary.partitions[3].rows,
    }
    got_a, got_b = drain_tube(a.address, "spread"), drain_tube(b.address, "spread")
    assert len(got_a) == summary.per_server[a.address] > 0
    assert len(got_b) == summary.per_server[b.address] > 0
    together = Counter(got_a + got_b)
    assert together == Counter(b"job-%d" % i for i in range(n))  # each row once, none twice


@pytest.mark.spark
def test_cli_enqueue_over_two_servers_and_the_list_form(
    spark: SparkSession, two_servers: tuple[BeanstalkServer, BeanstalkServer], tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main
    from cmdstalk_py.spark.datasource import enqueue

    a, b = two_servers
    data = tmp_path / "in.json"
    data.write_text("".join(f'{{"body": "r{i}"}}\n' for i in range(30)))
    args = ["enqueue", str(data), "--format", "json", "--tube", "cli", "--partitions", "3"]
    run = CliRunner().invoke(main, [*args, "--address", f"{a.address},{b.address}"])
    assert run.exit_code == 0, run.output
    on_a, on_b = (s.client().stats_tube("cli")["current-jobs-ready"] for s in (a, b))
    assert on_a + on_b == 30 and on_a > 0 and on_b > 0
    assert f"to {a.address} ({on_a}), {b.address} ({on_b})" in run.output, run.output
    # The API takes a list too; two partitions, one per server.
    df = spark.range(2, numPartitions=2).selectExpr("cast(id as string) as body")
    assert enqueue(df, "api", [a.address, b.address]) == 2
    assert [s.client().stats_tube("api")["current-jobs-ready"] for s in (a, b)] == [1, 1]


@pytest.mark.spark
def test_enqueue_with_a_server_down_names_it_and_puts_nothing(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main
    from cmdstalk_py.spark.datasource import enqueue
    from cmdstalk_py.spark.servers import ServerUnreachable

    down = f"127.0.0.1:{free_port()}"
    df = spark.createDataFrame([(f"r{i}",) for i in range(8)], "body string").repartition(4)
    with pytest.raises(ServerUnreachable) as info:
        enqueue(df, "t", f"{beanstalk.address},{down}")
    assert down in str(info.value) and info.value.addresses == (down,)
    assert beanstalk.address not in str(info.value)
    # The data source itself checks too, before any task runs.
    with pytest.raises(Exception, match=down.replace(".", r"\.")):
        df.write.format("beanstalkd").option("address", f"{beanstalk.address},{down}").mode(
            "append"
        ).save()
    data = tmp_path / "in.json"
    data.write_text('{"body": "a"}\n')
    args = ["enqueue", str(data), "--format", "json", "--address", f"{beanstalk.address},{down}"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 1 and "nothing was enqueued" in run.output, run.output
    assert down in run.output and "Traceback" not in run.output
    assert beanstalk.client().stats()["total-jobs"] == 0


def test_plan_over_servers_gives_every_tube_of_every_server_a_broker() -> None:
    from cmdstalk_py.spark.drainplan import BrokerSpec, plan_server_brokers

    plan = plan_server_brokers(("a:1", "b:2"), ("t", "u"), 2, None)
    units = sorted((s.server, s.tube) for task in plan for s in task)
    assert units == [("a:1", "t"), ("a:1", "u"), ("b:2", "t"), ("b:2", "u")]
    assert len(plan) == 2 and all(len(task) == 2 for task in plan)
    # By backlog: the busy server's tube gets the extra brokers; the idle one still one.
    plan = plan_server_brokers(("a:1", "b:2"), ("t",), 4, None, {("a:1", "t"): 900})
    specs = [s for task in plan for s in task]
    assert Counter(s.server for s in specs) == {"a:1": 4, "b:2": 1}
    assert BrokerSpec("t", 0, None, "b:2") in specs


@pytest.mark.spark
def test_drain_over_two_servers_empties_both(
    spark: SparkSession, two_servers: tuple[BeanstalkServer, BeanstalkServer], tmp_path: Path
) -> None:
    import json

    from cmdstalk_py.spark.cli import main

    a, b = two_servers
    for server, n in ((a, 5), (b, 7)):
        client = server.client(use="work")
        for i in range(n):
            client.put(f"{server.port}-{i}")
    events = tmp_path / "drain.jsonl"
    args = ["drain", "--address", f"{a.address},{b.address}", "--tubes", "work"]
    args += ["--cmd", "cat >/dev/null", "--parallelism", "2", "--idle-timeout", "2"]
    run = CliRunner().invoke(main, [*args, "--events", str(events)])
    assert run.exit_code == 0, run.output
    for server in (a, b):
        stats = server.client().stats_tube("work")
        assert (stats["current-jobs-ready"], stats["cmd-delete"]) == (0, stats["total-jobs"])
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert Counter(r["server"] for r in records) == {a.address: 5, b.address: 7}
    assert all(r["outcome"] == "deleted" for r in records)
    per_server = sorted({a.address: 5, b.address: 7}.items())
    assert "12 jobs" in run.output, run.output
    assert "servers: " + ", ".join(f"{s} {n}" for s, n in per_server) in run.output


def test_export_buried_from_two_servers_and_requeue_takes_one(
    two_servers: tuple[BeanstalkServer, BeanstalkServer], tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="the spark extra is not installed")
    from cmdstalk_py.spark.cli import main
    from tests.spark.test_deadletters import bury_jobs, tube_counts

    a, b = two_servers
    on_a, on_b = bury_jobs(a, "dlq", 3), bury_jobs(b, "dlq", 2)
    out = tmp_path / "dead.parquet"
    both = f"{a.address},{b.address}"
    args = ["export-buried", "--address", both, "--tube", "dlq", "--out", str(out), "--delete"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert f"exported 5 buried jobs of tube 'dlq' from {a.address}, {b.address}" in run.output
    assert "deleted 5" in run.output
    rows = pq.read_table(out).to_pylist()
    assert sorted((r["source"], r["id"]) for r in rows) == sorted(
        [(a.address, i) for i in on_a] + [(b.address, i) for i in on_b]
    )
    assert tube_counts(a, "dlq") == tube_counts(b, "dlq") == (0, 0, 0)
    # Requeue puts back to one server: several is a usage error, nothing is put.
    run = CliRunner().invoke(main, ["requeue", str(out), "--address", both])
    assert run.exit_code == 2 and "requeue takes one address" in run.output, run.output
    assert tube_counts(a, "dlq") == tube_counts(b, "dlq") == (0, 0, 0)
    run = CliRunner().invoke(main, ["requeue", str(out), "--address", b.address])
    assert run.exit_code == 0 and tube_counts(b, "dlq") == (0, 5, 0), run.output


def test_progress_names_each_server_and_the_wait_names_the_one_down(
    two_servers: tuple[BeanstalkServer, BeanstalkServer],
) -> None:
    from cmdstalk_py.spark.drainwatch import DrainError, Watch, tube_stats, wait_for_servers

    a, b = two_servers
    a.client(use="t").put("x")
    said: list[str] = []
    watch = Watch((a.address, b.address), ("t",), said.append, interval=0.05)
    line = watch.line(tube_stats(a.address, ("t",)), a.address)
    assert line == f"{a.address} t: 0 done, 0 failed (buried), 1 ready, 0 running"
    with watch:
        b.client(use="t").put("y")  # a change: the watch says the line again
        wait_until(lambda: any(f"{b.address} t: 0 done" in x for x in said), 120, message="line")
    assert f"{a.address} t: 0 done" in said[-1] and f"{b.address} t: " in said[-1]
    downs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    # The deadline on a clock of the test's own, moved only by the waits between rounds:
    # one deadline for the list, so three unreachable servers wait 5 s in all, not 15.
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with pytest.raises(DrainError) as info:
        wait_for_servers((a.address, *downs, b.address), 5.0, clock=lambda: now[0], sleep=sleep)
    assert f"cannot reach beanstalkd at {', '.join(downs)} for 5s" in str(info.value)
    assert a.address not in str(info.value) and b.address not in str(info.value)
    assert sum(slept) == 5.0 and len(slept) == 5, slept


def test_drain_refuses_a_malformed_address_list() -> None:
    from cmdstalk_py.spark.cli import main

    args = ["drain", "--address", "127.0.0.1:1,127.0.0.1:x", "--tubes", "t", "--cmd", "true"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 2 and "127.0.0.1:x" in run.output, run.output


@pytest.mark.spark
def test_a_failed_partition_names_its_server_and_the_count_stays_exact(spark: SparkSession) -> None:
    from cmdstalk_py.spark.datasource import write_jobs
    from cmdstalk_py.spark.writeresult import EnqueueFailed

    # The second server takes bodies of 10 bytes at most: its partitions fail at row 0.
    with running_beanstalkd() as a, running_beanstalkd("-z", "10") as small:
        df = spark.range(40, numPartitions=4).selectExpr("concat('long-body-', id) as body")
        with pytest.raises(EnqueueFailed) as info:
            write_jobs(df, "t", [a.address, small.address])
        summary = info.value.summary
        assert [p.partition for p in summary.failures] == [1, 3]
        assert all(small.address in (p.error or "") for p in summary.failures)
        assert "JOB_TOO_BIG" in str(info.value) and small.address in str(info.value)
        assert summary.per_server == {a.address: 20, small.address: 0}
        assert summary.rows == 20 == a.client().stats_tube("t")["current-jobs-ready"]
