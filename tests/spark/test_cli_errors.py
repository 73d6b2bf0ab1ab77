"""A failing `cmdstalk-spark` command prints one line naming the cause; --debug the trace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cmdstalk_py.spark.cli import main
from cmdstalk_py.spark.errors import cause_line
from tests.helpers import BeanstalkServer, free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def fails_in_one_line(args: list[str], *needles: str) -> None:
    result = CliRunner().invoke(main, args)
    text = result.output
    assert result.exit_code in (1, 2), text
    assert "Traceback" not in text and "\tat " not in text, text
    ours = ("starting", "[", "Usage:", "Try ")  # start, progress and usage lines
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(ours)]
    assert len(lines) <= 2, text
    for needle in needles:
        assert needle in text, text


def test_enqueue_failures_are_one_line(
    spark: SparkSession, beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    data = tmp_path / "in.json"
    data.write_text('{"body": "a"}\n')
    down = f"127.0.0.1:{free_port()}"
    fails_in_one_line(["enqueue", str(data), "--format", "json", "--address", down], down)
    fails_in_one_line(["enqueue", str(data), "--tube", "bad tube!"], "invalid tube name")
    missing = str(tmp_path / "missing.parquet")
    fails_in_one_line(["enqueue", missing, "--address", beanstalk.address], "missing.parquet")
    glob = str(tmp_path / "none-*.json")
    fails_in_one_line(["enqueue", glob, "--format", "json", "--address", beanstalk.address])
    fails_in_one_line(["report", "--events", glob, "--out", str(tmp_path / "r")])
    assert beanstalk.client().stats()["total-jobs"] == 0


def test_requeue_of_a_file_that_is_not_an_export(tmp_path: Path) -> None:
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not parquet")
    fails_in_one_line(["requeue", str(text_file)], "not an export-buried file")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), other)
    fails_in_one_line(["requeue", str(other)], "not an export-buried file", "body")


def test_debug_shows_the_trace(spark: SparkSession, tmp_path: Path) -> None:
    # A {a,b} glob is Spark's to expand (see preflight): the failure comes from Spark.
    glob = str(tmp_path / "{none,nada}.json")
    out = str(tmp_path / "o")
    result = CliRunner().invoke(main, ["--debug", "report", "--events", glob, "--out", out])
    assert result.exit_code == 1 and result.exception is not None
    assert not isinstance(result.exception, SystemExit)


def test_cause_line_finds_the_innermost_message() -> None:
    trace = (
        "An error occurred while calling o91.save.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: boom\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x)\n"
        "Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent...\n"
        '  File "/x/putter.py", line 12, in finish\n'
        "cmdstalk_py.spark.putter.PutFailed: beanstalkd write (partition 2): row 5: JOB_TOO_BIG\n"
        "\tat org.apache.spark.api.python.BasePythonRunner(x)\n"
    )
    assert cause_line(RuntimeError(trace)) == "beanstalkd write (partition 2): row 5: JOB_TOO_BIG"
    plain = "[PATH_NOT_FOUND] Path does not exist: file:/tmp/x.json. SQLSTATE: 42K03"
    assert (
        cause_line(RuntimeError(plain)) == "[PATH_NOT_FOUND] Path does not exist: file:/tmp/x.json."
    )


@pytest.mark.parametrize("top", ["0", "-1", "nan", "1e3", "10001"])
def test_a_bad_top_is_one_error_line_and_exit_2(top: str, tmp_path: Path) -> None:
    """Checked before Spark starts (no session asked for): nothing is written."""
    log = tmp_path / "events.jsonl"
    log.write_text("")
    out = tmp_path / "out"
    args = ["report", "--events", str(log), "--out", str(out), "--top", top]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "--top" in errors[0], result.output
    assert not out.exists()
