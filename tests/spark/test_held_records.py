"""The Spark readers of the event log skip its tube records (held back / servable again):
a log with them gives the same job figures as the same log without them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from cmdstalk_py.ops.eventlog import encode_line, event_record, tube_record
from cmdstalk_py.ops.observers import TubeHold
from cmdstalk_py.supervisor.results import Outcome
from tests.spark.test_report import T10, result

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def job_lines() -> list[bytes]:
    plan = [(Outcome.DELETED, {"exit_code": 0})] * 20 + [(Outcome.BURIED, {"exit_code": 2})] * 4
    jobs = [result("t", i, T10 + i, 30 + i, o, **kw) for i, (o, kw) in enumerate(plan)]
    return [encode_line(event_record(r._replace(pool="img"), "h", 1)) for r in jobs]


def with_tube_records(lines: list[bytes]) -> list[bytes]:
    """``lines`` with a held and a servable record after every fifth job, as a pool at its
    limit writes them (and one for a tube no job ran in)."""
    out: list[bytes] = []
    for i, line in enumerate(lines):
        out.append(line)
        if i % 5 == 0:
            for reason, running in (("limit", 2), (None, 1)):
                hold = TubeHold("img", "t", reason, running, 2, 5.0, 5.0)
                out.append(encode_line(tube_record(hold, "h", 1, T10 + i)))
    quiet = TubeHold("img", "quiet", "rate", 0, None, 0.5, 1.0)
    return [*out, encode_line(tube_record(quiet, "h", 1, T10))]


def test_report_figures_ignore_tube_records(spark: SparkSession, tmp_path: Path) -> None:
    from cmdstalk_py.spark import eventlog as ev
    from cmdstalk_py.spark.report import build_report, parse_window

    lines = job_lines()
    (tmp_path / "plain.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "held.jsonl").write_bytes(b"".join(with_tube_records(lines)))
    log = ev.read_events(spark, str(tmp_path / "held.jsonl"))
    try:
        assert (log.events.count(), log.rejected.count()) == (24, 0)
        assert "event" not in log.events.columns
    finally:
        log.release()
    plain = build_report(spark, str(tmp_path / "plain.jsonl"), tmp_path / "a", parse_window("1h"))
    held = build_report(spark, str(tmp_path / "held.jsonl"), tmp_path / "b", parse_window("1h"))
    assert (held.events, held.rejected, held.tubes) == (plain.events, plain.rejected, 1)
    for name in ("summary_csv", "tubes_csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(getattr(held, name)), pd.read_csv(getattr(plain, name))
        )
