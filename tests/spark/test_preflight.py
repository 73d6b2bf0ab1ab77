"""What can be checked without Spark is refused before Spark starts (issue #28 item 6).

Each command runs as its own process with ``JAVA_HOME`` (and ``PATH``) pointing at a fake
``java`` that leaves a mark and fails: a command that started Spark would have run it.
``test_the_fake_java_notices_a_spark_start`` shows the mark does appear when Spark starts.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cmdstalk_py.spark.inputs import csv_problem
from cmdstalk_py.spark.preflight import CHUNK_BYTES, PreflightError, data_files
from cmdstalk_py.spark.windowsize import window_for_span
from tests.helpers import BeanstalkServer, free_port

SCRIPT = Path(sys.executable).parent / "cmdstalk-spark"


@dataclass
class Run:
    """A finished ``cmdstalk-spark`` process and whether it started a JVM."""

    returncode: int
    stdout: str
    stderr: str
    java_started: bool


CliRun = Callable[..., Run]


@pytest.fixture
def spark_cli(tmp_path: Path) -> CliRun:
    """Runs ``cmdstalk-spark ARGS`` with a fake java that records being started."""
    home = tmp_path / "fake-jdk"
    (home / "bin").mkdir(parents=True)
    mark = tmp_path / "java-started"
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.pop("CMDSTALK_ADDRESS", None)
    env.update(JAVA_HOME=str(home), PATH=f"{home / 'bin'}:{env.get('PATH', '')}")

    def run(*args: str, extra_env: dict[str, str] | None = None) -> Run:
        out = subprocess.run(
            [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False,
            env={**env, **(extra_env or {})}, cwd=tmp_path,
        )  # fmt: skip
        return Run(out.returncode, out.stdout, out.stderr, mark.exists())

    return run


def refused_before_spark(run: Run, *needles: str) -> str:
    """Exit 1, one ``Error:`` line holding each needle, and no JVM; the line."""
    assert not run.java_started, run.stderr
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), run.stderr
    assert "starting Spark" not in run.stderr and not run.stdout, run.stdout + run.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_the_fake_java_notices_a_spark_start(
    spark_cli: CliRun, bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    # Everything checkable is fine here: the command goes on to start Spark.
    data = tmp_path / "ok.json"
    data.write_text('{"body": "a"}\n')
    run = spark_cli("enqueue", str(data), "--format", "json", "--address", bundled_server.address)
    assert run.java_started and run.returncode != 0, run.stderr
    assert bundled_server.client().stats()["total-jobs"] == 0


def test_enqueue_refuses_a_malformed_csv_before_spark(
    spark_cli: CliRun, bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    address = bundled_server.address
    bad = tmp_path / "bad.csv"
    bad.write_text('body,priority\n"a, b",1\n"never closed,2\nlast,3\n')
    run = spark_cli("enqueue", str(bad), "--format", "csv", "--address", address)
    refused_before_spark(run, "malformed CSV", "bad.csv line 4", "nothing was enqueued")
    wide = tmp_path / "wide.csv"
    wide.write_text("body\nfirst\nsecond,surplus\n")
    run = spark_cli("enqueue", str(wide), "--format", "csv", "--address", address)
    refused_before_spark(run, "malformed CSV", "line 3: 2 fields where the header has 1")
    other = tmp_path / "other.csv"
    other.write_text("payload\nx\n")
    run = spark_cli("enqueue", str(other), "--format", "csv", "--address", address)
    refused_before_spark(run, "no column 'body'", "['payload']")
    assert bundled_server.client().stats()["total-jobs"] == 0


def test_enqueue_refuses_missing_input_and_non_parquet_before_spark(
    spark_cli: CliRun, bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    pytest.importorskip("pyarrow", reason="the spark extra is not installed")
    address = bundled_server.address
    run = spark_cli("enqueue", str(tmp_path / "missing.parquet"), "--address", address)
    refused_before_spark(run, "missing.parquet does not exist")
    run = spark_cli(
        "enqueue", str(tmp_path / "none-*.json"), "--format", "json", "--address", address
    )
    refused_before_spark(run, "no file matches", "none-*.json")
    empty = tmp_path / "empty"
    (empty / "_temporary").mkdir(parents=True)
    (empty / "_SUCCESS").write_text("")
    run = spark_cli("enqueue", str(empty), "--address", address)
    refused_before_spark(run, "holds no data file")
    text = tmp_path / "notes.parquet"
    text.write_text("not parquet at all")
    run = spark_cli("enqueue", str(text), "--address", address)
    refused_before_spark(run, "cannot read", "notes.parquet as parquet")


def test_enqueue_refuses_a_dead_server_and_reads_cmdstalk_address(
    spark_cli: CliRun, tmp_path: Path
) -> None:
    data = tmp_path / "ok.json"
    data.write_text('{"body": "a"}\n')
    down = f"127.0.0.1:{free_port()}"
    run = spark_cli("enqueue", str(data), "--format", "json", "--address", down)
    refused_before_spark(run, "nothing was enqueued", down)
    # No --address: CMDSTALK_ADDRESS names the server, as for cmdstalk and cmdstalk-ctl.
    run = spark_cli("enqueue", str(data), "--format", "json", extra_env={"CMDSTALK_ADDRESS": down})
    refused_before_spark(run, down)


def test_report_refuses_missing_logs_and_a_used_out_before_spark(
    spark_cli: CliRun, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    run = spark_cli("report", "--events", str(tmp_path / "gone.jsonl"), "--out", str(out))
    refused_before_spark(run, "gone.jsonl does not exist")
    run = spark_cli("report", "--events", str(tmp_path / "logs-*.jsonl"), "--out", str(out))
    refused_before_spark(run, "no file matches")
    events = tmp_path / "events.jsonl"
    events.write_text("")
    out.mkdir()
    (out / "report.html").write_text("yesterday's")
    run = spark_cli("report", "--events", str(events), "--out", str(out))
    refused_before_spark(run, f"{out} exists and is not empty", "--overwrite")
    assert (out / "report.html").read_text() == "yesterday's"
    run = spark_cli("report", "--events", str(events), "--out", str(out), "--window", "1y")
    assert run.returncode == 2 and not run.java_started and "bad window" in run.stderr


def test_drain_refuses_unreachable_servers_and_bad_paths_before_spark(
    spark_cli: CliRun, bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    down = f"127.0.0.1:{free_port()}"
    bundled_server.client(use="t").put("kept")
    base = ["drain", "--tubes", "t", "--cmd", "true", "--connect-timeout", "1"]
    run = spark_cli(*base, "--address", f"{bundled_server.address},{down}")
    line = refused_before_spark(run, "cannot reach beanstalkd at", down, "for 1s")
    assert bundled_server.address not in line
    ok = ["--address", bundled_server.address]
    run = spark_cli(*base, *ok, "--cwd", str(tmp_path / "nowhere"))
    refused_before_spark(run, "--cwd", "nowhere is not a directory")
    run = spark_cli(*base, *ok, "--events", str(tmp_path / "no-dir" / "ev.jsonl"))
    refused_before_spark(run, "--events", "no-dir does not exist")
    assert not list(tmp_path.glob("cmdstalk-drain-*.jsonl"))
    assert bundled_server.client().stats_tube("t")["current-jobs-ready"] == 1  # nothing ran


# -- the checks themselves ---------------------------------------------------------------


def test_a_cut_short_csv_chunk_is_judged_up_to_its_last_whole_line() -> None:
    rows = [["body", "n"], ['é, "quoted"\nover two lines', "1"], ["plain", "2"]]
    path_text = "".join(_csv_line(r) for r in rows)
    data = path_text.encode()
    for cut in range(1, len(data)):
        # Cut anywhere (a character, a row, a quoted field): nothing wrong with the part read.
        assert csv_problem("x.csv", data[:cut], complete=False) == "", cut
    # The same cut, told it is the whole file, is a malformed file.
    inside_quotes = data.index(b"over")
    assert "unexpected end of data" in csv_problem("x.csv", data[:inside_quotes])
    # A fault before the last line is found in a part as in the whole.
    assert "b.csv line 2: ',' expected" in csv_problem("b.csv", b'body\n"a"b\nok\n', complete=False)
    assert csv_problem("b.csv", b"body,n\n1,2,3\nok,1\n", complete=False).startswith(
        "b.csv line 2: 3 fields"
    )
    assert "not UTF-8" in csv_problem("c.csv", b"body\n\xff\xfe\nmore\n", complete=False)


def _csv_line(row: list[str]) -> str:
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(row)
    return buf.getvalue()


def test_only_the_first_chunk_of_a_big_csv_is_read_before_spark(tmp_path: Path) -> None:
    from cmdstalk_py.spark.preflight import check_input

    big = tmp_path / "big.csv"
    with big.open("w") as f:
        f.write("body\n")
        while f.tell() < CHUNK_BYTES * 2:
            f.write("a fine row\n")
        f.write('"opened and never closed\n')
    check_input(str(big), "csv", "body")  # the fault lies past the part read: Spark's to find
    early = tmp_path / "early.csv"
    early.write_bytes(b"body\none,two\n" + big.read_bytes())
    with pytest.raises(PreflightError, match=r"early\.csv line 2: 2 fields"):
        check_input(str(early), "csv", "body")


def test_data_files_lists_what_spark_would_read(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    for name in ("_SUCCESS", ".part-0.crc", "part-1", "part-0"):
        (dataset / "date=2026-01-01").mkdir(parents=True, exist_ok=True)
        (dataset / "date=2026-01-01" / name).write_text("x")
    (dataset / "_temporary" / "0").mkdir(parents=True)
    (dataset / "_temporary" / "0" / "part-9").write_text("x")
    found = data_files(str(dataset))
    assert found is not None and [p.name for p in found] == ["part-0", "part-1"]
    assert data_files(f"file:{dataset}") == found
    assert data_files(f"{dataset}/*/part-1") == [dataset / "date=2026-01-01" / "part-1"]
    assert data_files(str(dataset), limit=1) == found[:1]
    # Not for this machine, or globs Hadoop expands and Python does not: Spark decides.
    assert data_files("hdfs://nn:8020/logs/x") is None
    assert data_files("s3a://bucket/logs/*.json") is None
    assert data_files(f"{tmp_path}/{{a,b}}.json") is None
    with pytest.raises(PreflightError, match="does not exist"):
        data_files(str(tmp_path / "gone"))


def test_the_window_follows_the_span() -> None:
    assert window_for_span(0).label == "1s"
    assert window_for_span(14).label == "1s"  # a 14 s drain: 14 bars, not one
    assert window_for_span(61).label == "2s"
    assert window_for_span(3600).label == "1m"
    assert window_for_span(86_400).label == "30m"
    assert window_for_span(30 * 86_400).label == "12h"
    assert window_for_span(10**9).label == "30d"
    for span in (1, 59, 3599, 86_401, 9 * 86_400):
        assert span / window_for_span(span).seconds <= 60
