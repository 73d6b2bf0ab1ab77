"""`cmdstalk-spark report` on synthetic event logs with known answers."""

from __future__ import annotations

import datetime as dt
import math
import random
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
from click.testing import CliRunner

from cmdstalk_py.ops.eventlog import encode_line, event_record
from cmdstalk_py.supervisor.results import JobResult, Outcome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

T10 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.UTC).timestamp()
T11 = T10 + 3600


def result(
    tube: str, i: int, start: float, duration_ms: int, outcome: Outcome, **kw: Any
) -> JobResult:
    return JobResult(
        job_id=i,
        tube=tube,
        slot=i % 3,
        outcome=outcome,
        started_at=start,
        ended_at=start + duration_ms / 1000,
        priority=1024,
        ttr=60,
        releases=0,
        timeouts=0,
        reserves=1,
        age_s=kw.pop("age_s", 0),
        payload_bytes=10,
        **kw,
    )


def alpha_10h() -> list[JobResult]:
    """12,000 jobs in 10:00-11:00 with distinct durations 1..12000 ms in random order."""
    durations = list(range(1, 12_001))
    random.Random(7).shuffle(durations)
    plan = (
        [(Outcome.DELETED, {"exit_code": 0})] * 9000
        + [(Outcome.RELEASED, {"exit_code": 1, "release_delay": 1})] * 1000
        + [(Outcome.RELEASED, {"exit_code": 3, "release_delay": 1})] * 500
        + [(Outcome.BURIED, {"exit_code": 2})] * 700
        + [(Outcome.PRECHECK_BURIED, {})] * 300
        + [(Outcome.TIMEOUT_BURIED, {"signal": 9})] * 400
        + [(Outcome.LOST, {"error": "NOT_FOUND"})] * 100
    )
    return [
        result("alpha", i, T10 + i * 0.25, durations[i], outcome, age_s=i % 100, **extra)
        for i, (outcome, extra) in enumerate(plan)
    ]


def v1(record: dict[str, object]) -> dict[str, object]:
    """A v2 record as a supervisor from before pools wrote it."""
    old = {k: v for k, v in record.items() if k not in ("pool", "server")}
    return {**old, "schema": 1}


def write_logs(tmp: Path) -> Path:
    logs = tmp / "logs"
    logs.mkdir()
    alpha = alpha_10h()
    late = [
        result("alpha", 20_000 + i, T11 + i, i + 1, Outcome.DELETED, exit_code=0)
        for i in range(100)
    ]
    beta = [
        result(
            "beta/x",
            30_000 + i,
            T10 + 60 + i,
            5,
            Outcome.DELETED if i % 2 else Outcome.SHUTDOWN_RELEASED,
            exit_code=0 if i % 2 else None,
            signal=None if i % 2 else 15,
        )
        for i in range(50)
    ]
    everything = alpha + late + beta
    # Two supervisors on two hosts, each with its own file: h1 an older one writing schema
    # v1 (no pool, no server), h2 a current one (v2).
    for host, part in (("h1", everything[0::2]), ("h2", everything[1::2])):
        records = [event_record(r._replace(pool="imaging", server="q:11300"), host, 100)
                   for r in part]  # fmt: skip
        if host == "h1":
            records = [v1(record) for record in records]
        (logs / f"{host}.jsonl").write_bytes(b"".join(encode_line(r) for r in records))
    (logs / "junk.jsonl").write_bytes(
        b'not json\n{"schema": 1, "tube": "alpha", "start": "yesterday"}\n'
        + encode_line({**event_record(alpha[0], "h3", 1), "schema": 99})
    )
    return logs


def test_report_counts_rates_and_percentiles(spark: SparkSession, tmp_path: Path) -> None:
    import pandas as pd

    from cmdstalk_py.spark.cli import main
    from cmdstalk_py.spark.report import PERCENTILE_ACCURACY

    logs = write_logs(tmp_path)
    out = tmp_path / "report"
    run = CliRunner().invoke(
        main, ["report", "--events", str(logs / "*.jsonl"), "--out", str(out), "--window", "1h"]
    )
    assert run.exit_code == 0, run.output
    assert "12150 events (3 rejected), 2 tubes, 3 windows" in run.output
    assert "reading event logs" in run.output  # progress lines

    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["tube"]) == ["alpha", "alpha", "beta/x"]
    a10, a11, beta = (summary.iloc[i] for i in range(3))
    assert a10["window_start"].startswith("2026-11-21 10:00:00")
    assert a10["jobs"] == 12_000 and a10["hosts"] == 2
    assert a10["jobs_per_s"] == pytest.approx(12_000 / 3600)
    assert a10["success_rate"] == pytest.approx(9000 / 12_000)
    assert a10["release_rate"] == pytest.approx(1500 / 12_000)
    assert a10["bury_rate"] == pytest.approx(1000 / 12_000)
    assert a10["timeout_rate"] == pytest.approx(400 / 12_000)
    assert a10["lost_rate"] == pytest.approx(100 / 12_000)
    assert a10["top_failures"] == "exit 1 ×1000, exit 2 ×700, exit 3 ×500"
    assert a10["age_avg_s"] == pytest.approx(49.5) and a10["age_max_s"] == 99
    # Durations are 1..n ms, so a value's rank is the value itself.
    n = 12_000
    for p, column in (
        (0.5, "duration_p50_ms"),
        (0.9, "duration_p90_ms"),
        (0.99, "duration_p99_ms"),
    ):
        rank = round(a10[column])
        assert abs(rank - math.ceil(p * n)) <= n / PERCENTILE_ACCURACY + 1, (column, rank)
    # Under 10,000 jobs a window's percentiles are exact.
    assert a11["jobs"] == 100 and a11["success_rate"] == 1.0 and pd.isna(a11["top_failures"])
    assert [round(a11[c]) for c in ("duration_p50_ms", "duration_p90_ms", "duration_p99_ms")] == [
        50,
        90,
        99,
    ]
    assert beta["jobs"] == 50 and beta["shutdown_rate"] == pytest.approx(0.5)
    assert beta["top_failures"] == "SIGTERM ×25"

    tubes = pd.read_csv(out / "tubes.csv")
    assert dict(zip(tubes["tube"], tubes["jobs"], strict=True)) == {"alpha": 12_100, "beta/x": 50}

    events = spark.read.parquet(str(out / "events"))
    assert events.count() == 12_150
    # Both versions read: v1 rows as pool "default" with no server, v2 rows as written.
    by_version = {
        (row["schema"], row["pool"], row["server"]): row["count"]
        for row in events.groupBy("schema", "pool", "server").count().collect()
    }
    assert by_version == {(1, "default", None): 6075, (2, "imaging", "q:11300"): 6075}
    assert (out / "events" / "tube=alpha" / "date=2026-11-21").is_dir()
    assert spark.read.parquet(str(out / "windows")).count() == 3
    page = (out / "report.html").read_text()
    pngs = sorted((out / "charts").glob("*.png"))
    assert len(pngs) == 2 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    for png in pngs:
        assert f'href="charts/{png.name}"' in page
    assert page.count("<svg") == 2 and "<?xml" not in page  # the same charts, inline
    assert "Tube beta/x" in page and "exit 1 ×1000" in page


def test_window_parsing() -> None:
    from cmdstalk_py.spark.report import WindowSize, parse_window

    assert parse_window("1h") == WindowSize(3600, "1 hours", "1h")
    assert parse_window("15m").seconds == 900 and parse_window("2d").seconds == 172_800
    for bad in ("", "0h", "1w", "h", "-1h"):
        with pytest.raises(ValueError):
            parse_window(bad)


class _Tables(HTMLParser):
    """The cells of every <table> in a page: tables -> rows -> cell texts (<br> = newline)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_a_short_log_reads_well(spark: SparkSession, tmp_path: Path) -> None:
    from cmdstalk_py.spark.charts import tube_figure
    from cmdstalk_py.spark.report import build_report, parse_window

    failing = [(Outcome.BURIED, {"exit_code": 70 + i % 4}) for i in range(12)]
    plan = [(Outcome.DELETED, {"exit_code": 0})] * 30 + failing
    jobs = [
        result("short", i, T10 + 600 + i * 0.5, 40 + i, o, **kw) for i, (o, kw) in enumerate(plan)
    ]
    (tmp_path / "short.jsonl").write_bytes(
        b"".join(encode_line(event_record(r, "h", 1)) for r in jobs)
    )
    files = build_report(spark, str(tmp_path / "short.jsonl"), tmp_path / "out", parse_window("1h"))
    windows = pd.read_csv(files.summary_csv)
    tubes = pd.read_csv(files.tubes_csv)
    # One definition of jobs/s: a log shorter than the window has one rate in both tables.
    assert windows["jobs_per_s"][0] == pytest.approx(tubes["jobs_per_s"][0])
    assert tubes["jobs_per_s"][0] == pytest.approx(42 / (20.5 + 0.081), rel=0.01)
    fig = tube_figure(windows, "short")
    axes = fig.get_axes()
    assert len(axes) == 3 and len(axes[1].patches) >= 2  # throughput, outcomes, latency
    assert all(ax.get_ylim()[0] == 0 for ax in axes)
    low, high = axes[2].get_xlim()  # days: the axis spans the one hour window, not years
    assert 0 < high - low <= 1 / 24 + 1e-9
    parser = _Tables()
    parser.feed(files.html.read_text())
    for table in parser.tables:
        header = table[0]
        assert "top failures" in header[: len(header) // 2 + 6], header
        # Characters of the widest line per column, at ~7.5 px each plus cell padding.
        widths = [
            max(len(line) for row in table for line in row[i].split("\n"))
            for i in range(len(header))
        ]
        assert sum(w * 7.5 + 14 for w in widths) < 1400 - 64, (header, widths)


def test_cli_report_windows_follow_the_log_and_out_is_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.cli import main

    # A 14 s drain: at the old fixed 1 h it was one bar; from its span, 1 s windows.
    jobs = [result("quick", i, T10 + i * 0.5, 100, Outcome.DELETED, exit_code=0) for i in range(28)]
    log = tmp_path / "drain.jsonl"
    log.write_bytes(b"".join(encode_line(event_record(r, "h", 1)) for r in jobs))
    out = tmp_path / "out"
    args = ["report", "--events", str(log), "--out", str(out)]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert "14 windows of 1s (from the log's span)" in run.output, run.output
    assert len(pd.read_csv(out / "summary.csv")) == 14
    assert "(1s windows)" in (out / "report.html").read_text()
    # Run again into the same OUT: refused, the report left as it was.
    (out / "charts" / "999-old-tube.png").write_bytes(b"a tube this log has not")
    again = CliRunner().invoke(main, [*args, "--window", "1h"])
    assert again.exit_code == 1 and "--overwrite" in again.output, again.output
    assert len(pd.read_csv(out / "summary.csv")) == 14
    # --overwrite replaces the report, charts and all; --window is the length asked for.
    again = CliRunner().invoke(main, [*args, "--window", "1h", "--overwrite"])
    assert again.exit_code == 0, again.output
    assert "1 window of 1h\n" in again.output, again.output
    assert len(pd.read_csv(out / "summary.csv")) == 1
    assert [p.name for p in (out / "charts").iterdir()] == ["000-quick.png"]


def test_a_tube_name_is_text_in_the_page_and_its_charts(tmp_path: Path) -> None:
    """Tube names come from producers: in the inline SVG and the HTML they stay text."""
    from cmdstalk_py.spark.charts import write_html

    tube = "<script>alert(1)</script>&$x$"
    start = pd.Timestamp("2026-11-21 10:00")
    window = {
        "tube": tube, "window_start": start, "window_end": start + pd.Timedelta(hours=1),
        "jobs": 10, "jobs_per_s": 1.0, "success_rate": 1.0, "release_rate": 0.0,
        "bury_rate": 0.0, "timeout_rate": 0.0, "lost_rate": 0.0, "duration_p50_ms": 1.0,
        "duration_p90_ms": 2.0, "duration_p99_ms": 3.0, "top_failures": "",
    }  # fmt: skip
    page = write_html(
        tmp_path, pd.DataFrame([window]), pd.DataFrame([{"tube": tube, "jobs": 10}]), "t", []
    ).read_text()
    assert "<script" not in page and page.count("<svg") == 1
    # Escaped once, and the two "$" did not turn the title into a formula.
    assert "tube &lt;script&gt;alert(1)&lt;/script&gt;&amp;$x$: throughput" in page
