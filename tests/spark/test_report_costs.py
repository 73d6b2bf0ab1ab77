"""`cmdstalk-spark report` on what jobs cost (issue #29): peak memory and CPU per tube and
window, and the jobs that cost most, from logs the real ``EventLog`` and a real ``cmdstalk``
wrote; logs from before schema 4 (no figures) give empty figures, not a failure."""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
from click.testing import CliRunner

from cmdstalk_py.ops.eventlog import EventLog, event_record
from cmdstalk_py.supervisor.results import JobResult, Outcome, Reason
from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.spark.test_report import _Tables
from tests.supervisor.conftest import read_events, start_cmdstalk

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

MiB = 1 << 20
T10 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.UTC).timestamp()
FIGURES = ("peak_memory_bytes", "cpu_s", "procs")


def job(tube: str, i: int, outcome: Outcome = Outcome.DELETED, **kw: Any) -> JobResult:
    return JobResult(
        job_id=i, tube=tube, slot=0, outcome=outcome, started_at=T10 + i,
        ended_at=T10 + i + 0.5, priority=1024, ttr=60, releases=0, timeouts=0, reserves=1,
        age_s=0, payload_bytes=10, exit_code=0 if outcome is Outcome.DELETED else None, **kw,
    )  # fmt: skip


def convert_jobs() -> list[JobResult]:
    """``convert``: jobs 1..200 peak at i MiB and use a permutation of 0.01..2.00 CPU
    seconds (so the costliest by memory are not the costliest by CPU), those over 190 MiB
    killed by the memory limit; 30 with CPU only (no limit set: no memory samples); 10
    with neither."""
    jobs = []
    for i in range(1, 201):
        over = i > 190
        jobs.append(
            job(
                "convert", i, Outcome.BURIED if over else Outcome.DELETED,
                reason=Reason.MEMORY if over else None, killed=Reason.MEMORY if over else None,
                peak_memory_bytes=i * MiB, cpu_s=((i * 37) % 200 + 1) / 100, procs=2,
            )
        )  # fmt: skip
    jobs += [job("convert", 300 + i, cpu_s=0.001) for i in range(30)]
    return jobs + [job("convert", 400 + i) for i in range(10)]


def old_record(result: JobResult, schema: int) -> dict[str, object]:
    """``result`` as a supervisor from before schema 4 wrote it (v1: no pool, server)."""
    dropped = FIGURES if schema == 2 else (*FIGURES, "pool", "server")
    record = event_record(result, "old-host", 7)
    return {**{k: v for k, v in record.items() if k not in dropped}, "schema": schema}


def write_log(path: Path, results: list[JobResult], old: list[JobResult]) -> None:
    """``results`` through the real EventLog as the supervisor hands them over, and ``old``
    as v2 and v1 records (alternately) through the same writer."""
    log = EventLog(str(path), hostname="h", pid=1)
    try:
        for result in results:
            log.job_finished(result)
        assert log.flush()
        for n, result in enumerate(old):
            log.write_record(old_record(result, 2 if n % 2 else 1))
    finally:
        log.close()


def rank_value(values: Sequence[float], p: float) -> float:
    """The smallest value with at least p·n of the n values at or below it."""
    return sorted(values)[math.ceil(p * len(values)) - 1]


def run_report(log: Path, out: Path, *extra: str) -> str:
    from cmdstalk_py.spark.cli import main

    args = ["report", "--events", str(log), "--out", str(out), "--window", "1h", *extra]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    return run.output


def table_with(page: str, header: str) -> list[list[str]]:
    parser = _Tables()
    parser.feed(page)
    return next(t for t in parser.tables if header in t[0])


def test_report_figures_and_costliest_jobs(spark: SparkSession, tmp_path: Path) -> None:
    convert = convert_jobs()
    legacy = [job("legacy", 500 + i) for i in range(20)]
    write_log(tmp_path / "events.jsonl", convert, legacy)
    out = tmp_path / "out"
    output = run_report(tmp_path / "events.jsonl", out, "--top", "3")
    assert "260 events (0 rejected), 2 tubes, 2 windows" in output, output
    assert "figures of peak memory for 200 jobs, of CPU for 230\n" in output, output
    assert f"costs:   {out / 'costliest.csv'} (top 3 per tube" in output, output

    memory = [r.peak_memory_bytes for r in convert if r.peak_memory_bytes is not None]
    cpu = [r.cpu_s for r in convert if r.cpu_s is not None]
    expected = {
        "memory_jobs": 200, "memory_p50_bytes": 100 * MiB, "memory_p95_bytes": 190 * MiB,
        "memory_max_bytes": 200 * MiB, "cpu_jobs": 230, "cpu_p50_s": rank_value(cpu, 0.5),
        "cpu_p95_s": rank_value(cpu, 0.95), "cpu_max_s": 2.0,
    }  # fmt: skip
    assert expected["memory_p95_bytes"] == rank_value(memory, 0.95)
    assert (expected["cpu_p50_s"], expected["cpu_p95_s"]) == (0.85, 1.89)
    tubes = pd.read_csv(out / "tubes.csv").set_index("tube")
    windows = pd.read_csv(out / "summary.csv").set_index("tube")
    for table in (tubes, windows):  # the one window holds the whole log: the same figures
        assert table.loc["convert", list(expected)].to_dict() == pytest.approx(expected)
        assert table.loc["legacy", ["memory_jobs", "cpu_jobs"]].tolist() == [0, 0]
        assert table.loc["legacy", [c for c in expected if not c.endswith("jobs")]].isna().all()
    parquet = spark.read.parquet(str(out / "windows")).where("tube = 'convert'").first()
    assert parquet is not None and parquet["memory_p95_bytes"] == 190 * MiB

    costliest = pd.read_csv(out / "costliest.csv")
    by_cpu = sorted((r for r in convert if r.cpu_s is not None), key=lambda r: -(r.cpu_s or 0))
    assert costliest[["tube", "by", "rank", "job_id", "outcome"]].values.tolist() == [
        *(["convert", "cpu", n + 1, r.job_id, r.outcome.value] for n, r in enumerate(by_cpu[:3])),
        ["convert", "memory", 1, 200, "buried"],
        ["convert", "memory", 2, 199, "buried"],
        ["convert", "memory", 3, 198, "buried"],
    ]
    assert costliest["cpu_s"].tolist()[:3] == [2.0, 1.99, 1.98]
    assert costliest["peak_memory_bytes"].tolist()[3:] == [200 * MiB, 199 * MiB, 198 * MiB]
    assert spark.read.parquet(str(out / "costliest")).count() == 6

    page = (out / "report.html").read_text()
    costs = table_with(page, "mem p95 MiB")
    assert costs[1:] == [
        ["convert", "200", "100.0", "190.0", "200.0", "230", "0.850", "1.890", "2.000"],
        ["legacy", "0", "", "", "", "0", "", "", ""],
    ]
    top = table_with(page, "peak MiB")
    assert [row[:6] for row in top[1:]][3] == ["memory", "1", "200", "buried", "200.0", "0.010"]
    for table in (costs, top):  # as the other tables: fits a 1,400 px window
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        assert sum(w * 7.5 + 14 for w in widths) < 1400 - 64, (table[0], widths)


def test_a_log_from_before_schema_4_reports_without_figures(
    spark: SparkSession, tmp_path: Path
) -> None:
    write_log(tmp_path / "old.jsonl", [], [job("legacy", i) for i in range(40)])
    out = tmp_path / "out"
    output = run_report(tmp_path / "old.jsonl", out)
    assert "40 events (0 rejected), 1 tubes, 1 window of 1h" in output, output
    assert "no peak memory or CPU figures (event log records before schema 4" in output, output
    tubes = pd.read_csv(out / "tubes.csv")
    assert tubes[["jobs", "memory_jobs", "cpu_jobs"]].values.tolist() == [[40, 0, 0]]
    assert tubes[["memory_p50_bytes", "memory_max_bytes", "cpu_p95_s"]].isna().all(axis=None)
    costliest = pd.read_csv(out / "costliest.csv")
    assert len(costliest) == 0 and "peak_memory_bytes" in costliest.columns
    page = (out / "report.html").read_text()
    assert "No job in these logs has figures of peak memory or CPU" in page
    assert "Jobs that cost most" not in page


def test_report_ranks_what_a_real_supervisor_measured(
    spark: SparkSession, bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    from cmdstalk_py.spark.report import build_report, parse_window

    py = sys.executable
    producer = bundled_server.client(use="costs")
    # Holds 150 MB a moment (a limit far above it: memory is sampled only under a limit).
    greedy = producer.put(f"{py} -c 'import time; b = bytearray(150 << 20); time.sleep(1)'")
    spinner = producer.put(f"{py} -c 'sum(i * i for i in range(6_000_000))'")
    small = producer.put(b"true")
    events = tmp_path / "events.jsonl"
    proc = start_cmdstalk(
        "--address", bundled_server.address, "--tubes", "costs", "--cmd", 'eval "$(cat)"',
        "--events", str(events), "--max-memory", "1G", stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: len(read_events(events)) >= 3, 60, message="3 event records")
    finally:
        stop_process(proc)
    files = build_report(spark, str(events), tmp_path / "out", parse_window("1h"), top=1)
    assert (files.events, files.cpu_jobs) == (3, 3) and files.memory_jobs >= 1
    tubes = pd.read_csv(files.tubes_csv)
    assert 150 * MiB < tubes["memory_max_bytes"][0] < 1 << 30
    costliest = pd.read_csv(files.costliest_csv)
    assert costliest[["by", "rank", "job_id"]].values.tolist() == [
        ["cpu", 1, spinner],
        ["memory", 1, greedy],
    ]
    assert small not in costliest["job_id"].tolist()
    assert tubes["cpu_max_s"][0] == costliest["cpu_s"][0] > 0.1
