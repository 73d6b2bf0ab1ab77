"""Smoke test of benchmarks/server.py: quick runs finish, print the table, save the JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import beanstalkd_path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "server.py"
# The same test as the conftest fixtures use to decide whether the bundled server exists.
BUNDLED = importlib.util.find_spec("cmdstalk_py.server.embedded") is not None
HEADER = ("metric", "beanstalkd", "bundled", "ratio", "target", "result")
ROWS = (
    "pipelined puts, 1 conn",
    "put-reserve-delete, 1 conn",
    "put-reserve-delete, 16 conns",
    "drain 3,000 jobs, 4 conns",
    "server CPU per command",
    "memory per job",
    "start-up to first accept",
    "start-up to first reply",
)

pytestmark = pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), "--quick", *args],
        capture_output=True, text=True, timeout=90, check=False,
    )


def table_rows(stdout: str) -> dict[str, str]:
    """Table lines by their metric label (the table is fixed-width, labels first)."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("metric"))
    assert all(word in lines[header] for word in HEADER), lines[header]
    rows: dict[str, str] = {}
    for line in lines[header + 2:]:
        if not line.strip():
            break
        rows[line[:32].strip()] = line
    return rows


def test_quick_run_against_real_beanstalkd(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = run_bench("--only", "beanstalkd", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = table_rows(proc.stdout)
    for label in ROWS:
        row = next((r for name, r in rows.items() if name.startswith(label)), None)
        assert row is not None, f"no row {label!r} in:\n{proc.stdout}"
    report = json.loads(out.read_text())
    figures = {f["key"]: f for f in report["figures"]}
    assert set(figures) >= {"puts_pipelined_1conn", "cycles_1conn", "cycles_16conn",
                            "drain_4conn", "cpu_per_command", "memory_per_job",
                            "startup_accept"}
    for figure in figures.values():
        assert figure["values"]["beanstalkd"] > 0, figure
        assert figure["ratio"] is None  # nothing to compare with
    # beanstalkd starts in milliseconds; a figure of seconds would mean broken timing.
    assert figures["startup_accept"]["values"]["beanstalkd"] < 1.0


def test_quick_durable_run(tmp_path: Path) -> None:
    # Both servers when the bundled one exists: it must accept -b, or the run exits 2.
    only = [] if BUNDLED else ["--only", "beanstalkd"]
    out = tmp_path / "durable.json"
    proc = run_bench("--durable", "--json", str(out), *only)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert any(name.startswith("durable -f 0: pipelined puts") for name in rows), rows
    assert any(name.startswith("recovery of 5,000 jobs") for name in rows), rows
    report = json.loads(out.read_text())
    assert report["errors"] == []
    kinds = {"beanstalkd", *(["bundled"] if BUNDLED else [])}
    for figure in report["figures"]:
        assert set(figure["values"]) == kinds, figure
        assert all(v > 0 for v in figure["values"].values()), figure


@pytest.mark.skipif(not BUNDLED, reason="the bundled server is not in this checkout")
def test_quick_run_compares_both_servers(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = run_bench("--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = table_rows(proc.stdout)
    for label in ROWS:
        row = next(r for name, r in rows.items() if name.startswith(label))
        assert ("PASS" in row) != ("FAIL" in row), row
    for figure in json.loads(out.read_text())["figures"]:
        assert figure["values"]["bundled"] > 0, figure
        assert figure["ratio"] is not None and figure["ratio"] > 0, figure
