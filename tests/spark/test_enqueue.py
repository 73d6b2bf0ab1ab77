"""The beanstalkd data source, enqueue(), the streaming helper and `cmdstalk-spark enqueue`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from cmdstalk_py.client.pipeline import Client
from tests.helpers import (
    BeanstalkServer,
    accepts_connections,
    beanstalkd_path,
    free_port,
    running_beanstalkd,
    wait_until,
)
from tests.spark.rawjobs import drain_tube

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def expected_body(i: int) -> bytes:
    """Row i's body: varied lengths, and bytes (CR, LF, NUL, 0xff) a text path would mangle."""
    return b"row-%d-" % i + b"\r\n\x00\xff"[: i % 5] + b"x" * (i % 37)


def test_100k_rows_become_exactly_100k_jobs(
    spark: SparkSession, beanstalk: BeanstalkServer
) -> None:
    from pyspark.sql import functions as F

    from cmdstalk_py.spark.datasource import write_jobs

    n = 100_000
    body = F.concat(
        F.encode(F.concat(F.lit("row-"), F.col("id").cast("string"), F.lit("-")), "UTF-8"),
        F.substring(F.unhex(F.lit("0D0A00FF")), 1, F.col("id") % 5),
        F.encode(F.repeat(F.lit("x"), (F.col("id") % 37).cast("int")), "UTF-8"),
    )
    df = spark.range(n, numPartitions=4).select(body.alias("body"))
    assert dict(df.dtypes)["body"] == "binary"
    summary = write_jobs(df, tube="bulk", address=beanstalk.address)
    assert summary.rows == n
    assert sorted(p.partition for p in summary.partitions) == [0, 1, 2, 3]
    assert sum(p.rows for p in summary.partitions) == n and summary.per_tube == {"bulk": n}
    stats = beanstalk.client().stats_tube("bulk")
    assert (stats["total-jobs"], stats["current-jobs-ready"]) == (n, n)
    got = drain_tube(beanstalk.address, "bulk")
    assert len(got) == n
    assert Counter(got) == Counter(expected_body(i) for i in range(n))


def test_string_bodies_are_utf8_and_per_row_overrides_win(
    spark: SparkSession, beanstalk: BeanstalkServer
) -> None:
    from cmdstalk_py.spark.datasource import enqueue

    rows = [
        ("plain é", None, None, None, None),
        ("to-other", "other", None, None, None),
        ("urgent", None, 5, None, None),
        ("late", "other", 7, 3600, 9),
        ("long-ttr", None, None, None, 300),
        ("back", None, None, 0, None),
    ]
    df = spark.createDataFrame(
        rows, "body string, tube string, priority long, delay int, ttr int"
    ).coalesce(1)
    assert enqueue(df, tube="main", address=beanstalk.address, priority=100, ttr=30) == 6
    seen: dict[str, dict[str, str]] = {}
    with Client.connect(beanstalk.address) as conn:
        for tube in ("main", "other"):
            conn.use(tube)
            for verb in (b"peek-ready", b"peek-delayed"):
                while True:
                    conn.send(verb + b"\r\n")
                    words = conn.read_line().split(b" ")
                    if words[0] == b"NOT_FOUND":
                        break
                    body = conn.read_body(int(words[2])).decode()
                    stats = conn.stats_job(int(words[1]))
                    seen[body] = {k: str(v) for k, v in stats.items()}
                    conn.delete(int(words[1]))
    want = {
        "plain é": ("main", "100", "30", "ready"),
        "to-other": ("other", "100", "30", "ready"),
        "urgent": ("main", "5", "30", "ready"),
        "late": ("other", "7", "9", "delayed"),
        "long-ttr": ("main", "100", "300", "ready"),
        "back": ("main", "100", "30", "ready"),
    }
    assert {b: (s["tube"], s["pri"], s["ttr"], s["state"]) for b, s in seen.items()} == want
    assert seen["late"]["delay"] == "3600"


def test_bad_schema_is_refused_before_any_job(
    spark: SparkSession, beanstalk: BeanstalkServer
) -> None:
    from cmdstalk_py.spark.datasource import enqueue

    with pytest.raises(Exception, match="needs a 'body' column"):
        enqueue(spark.createDataFrame([("x",)], "payload string"), address=beanstalk.address)
    with pytest.raises(Exception, match="unexpected column 'priorty'"):
        enqueue(
            spark.createDataFrame([("x", 1)], "body string, priorty int"), address=beanstalk.address
        )
    with pytest.raises(Exception, match="only appends"):
        spark.createDataFrame([("x",)], "body string").write.format("beanstalkd").option(
            "address", beanstalk.address
        ).mode("overwrite").save()
    assert beanstalk.client().stats()["total-jobs"] == 0


def test_job_too_big_fails_naming_partition_and_reply(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    from cmdstalk_py.spark.datasource import enqueue

    with running_beanstalkd("-z", "100") as server:
        # Partition 2 of 4 holds the one body over 100 bytes.
        df = spark.range(40, numPartitions=4).select(
            F.when(F.col("id") == 25, F.repeat(F.lit("y"), 150))
            .otherwise(F.col("id").cast("string"))
            .alias("body")
        )
        with pytest.raises(Exception) as info:
            enqueue(df, tube="small", address=server.address)
        text = str(info.value)
        assert "JOB_TOO_BIG" in text and "partition 2" in text and "row 5" in text, text


def test_connection_refused_fails_clearly(spark: SparkSession) -> None:
    from cmdstalk_py.spark.datasource import enqueue

    address = f"127.0.0.1:{free_port()}"
    df = spark.createDataFrame([("a",), ("b",)], "body string").coalesce(1)
    with pytest.raises(Exception) as info:
        enqueue(df, address=address)
    text = str(info.value)
    assert "cannot connect" in text and address in text and "partition 0" in text, text


def test_draining_server_fails_clearly(spark: SparkSession) -> None:
    from cmdstalk_py.spark.datasource import enqueue

    binary = beanstalkd_path()
    assert binary is not None
    port = free_port()
    proc = subprocess.Popen([binary, "-l", "127.0.0.1", "-p", str(port)])
    address = f"127.0.0.1:{port}"

    def stats() -> bytes:
        with Client.connect(address) as conn:
            conn.send(b"stats\r\n")
            words = conn.read_line().split(b" ")
            return conn.read_body(int(words[1]))

    try:
        # Answering, not only accepting: beanstalkd listens before it installs its signal
        # handlers, and a SIGUSR1 in between kills it (SIGUSR1's default action).
        wait_until(lambda: accepts_connections("127.0.0.1", port) and bool(stats()), 60,
                   message="beanstalkd up")  # fmt: skip
        proc.send_signal(signal.SIGUSR1)  # beanstalkd enters drain mode: puts get DRAINING
        wait_until(lambda: b"draining: true" in stats(), 60, message="drain mode")
        df = spark.createDataFrame([("a",)], "body string").coalesce(1)
        with pytest.raises(Exception) as info:
            enqueue(df, address=address)
        assert "DRAINING" in str(info.value) and "partition 0" in str(info.value)
    finally:
        proc.terminate()
        proc.wait(10)


def test_streaming_helper_enqueues_every_micro_batch(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.datasource import enqueue_stream

    source = tmp_path / "in"
    source.mkdir()
    for part in range(3):
        lines = [json.dumps({"body": f"s{part}-{i}"}) for i in range(100)]
        (source / f"part{part}.json").write_text("\n".join(lines) + "\n")
    stream = (
        spark.readStream.schema("body string").option("maxFilesPerTrigger", 1).json(str(source))
    )
    query = enqueue_stream(
        stream,
        "stream",
        beanstalk.address,
        checkpoint_location=str(tmp_path / "ckpt"),
        available_now=True,
    )
    assert query.awaitTermination(300), "the query did not process the three files"
    assert query.exception() is None
    assert len(query.recentProgress) == 3  # one micro-batch per file
    got = drain_tube(beanstalk.address, "stream")
    assert sorted(got) == sorted(f"s{p}-{i}".encode() for p in range(3) for i in range(100))


def test_cli_enqueue_csv_with_overrides(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main

    csv = tmp_path / "jobs.csv"
    csv.write_text(
        "payload,priority,tube\n"
        + "".join(f"p{i},{i},{'t2' if i % 2 else ''}\n" for i in range(10))
    )
    result = CliRunner().invoke(
        main,
        [
            "enqueue",
            str(csv),
            "--format",
            "csv",
            "--tube",
            "t1",
            "--address",
            beanstalk.address,
            "--body-column",
            "payload",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "enqueued 10 jobs" in result.output
    assert sorted(drain_tube(beanstalk.address, "t1")) == [b"p0", b"p2", b"p4", b"p6", b"p8"]
    assert sorted(drain_tube(beanstalk.address, "t2")) == [b"p1", b"p3", b"p5", b"p7", b"p9"]


def test_console_script_help_needs_no_jvm() -> None:
    script = Path(sys.executable).parent / "cmdstalk-spark"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("enqueue", "report", "export-buried", "requeue"):
        assert command in out.stdout


def test_idempotency_key_is_the_body_sha256(spark: SparkSession) -> None:
    import hashlib

    from cmdstalk_py.spark.datasource import with_idempotency_key

    text = spark.createDataFrame([("a",), ("é\r\n",)], "body string")
    binary = spark.createDataFrame([(b"\x00\xff",)], "body binary")
    for df in (text, binary):
        for row in with_idempotency_key(df).collect():
            raw = row["body"].encode() if isinstance(row["body"], str) else bytes(row["body"])
            assert row["idempotency_key"] == "sha256:" + hashlib.sha256(raw).hexdigest()


def test_cli_enqueue_reads_standard_csv_quoting(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    import csv as pycsv

    from cmdstalk_py.spark.cli import main

    bodies = ['{"numbers": [1, 1.5]}', 'two\nlines, "quoted"', "plain", 'a ""doubled"" one']
    path = tmp_path / "jobs.csv"
    with path.open("w", newline="") as f:  # as Python's csv, pandas and spreadsheets write
        writer = pycsv.writer(f)
        writer.writerow(["body", "priority"])
        writer.writerows([b, i] for i, b in enumerate(bodies))
    args = ["enqueue", str(path), "--format", "csv", "--tube", "rfc"]
    result = CliRunner().invoke(main, [*args, "--address", beanstalk.address])
    assert result.exit_code == 0, result.output
    assert sorted(drain_tube(beanstalk.address, "rfc")) == sorted(b.encode() for b in bodies)


def test_cli_enqueue_refuses_malformed_csv_before_any_job(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main
    from cmdstalk_py.spark.preflight import CHUNK_BYTES

    # Past the part read before Spark starts (see test_preflight): Spark's own check,
    # which reads every byte, refuses them before any job is put.
    fine = "body,priority\n" + "a fine row,1\n" * (CHUNK_BYTES // 10)
    for name, text in {
        "unterminated.csv": fine + '"never closed,2\nlast,3\n',
        "extra-field.csv": fine + "second,2,surplus\n",
    }.items():
        path = tmp_path / name
        path.write_text(text)
        args = ["enqueue", str(path), "--format", "csv", "--address", beanstalk.address]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        assert "malformed CSV" in result.output and "nothing was enqueued" in result.output
        assert beanstalk.client().stats()["total-jobs"] == 0
