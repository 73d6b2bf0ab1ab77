"""Smoke tests of benchmarks/server.py and benchmarks/server_startup.py: quick runs
finish, print their tables, save their JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import beanstalkd_path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "server.py"
STARTUP = BENCH.parent / "server_startup.py"
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


@pytest.mark.skipif(not BUNDLED, reason="the bundled server is not in this checkout")
def test_quick_startup_run(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    proc = subprocess.run(
        [sys.executable, str(STARTUP), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for label in ("python -c pass", "bundled: first accept", "bundled: first reply",
                  "beanstalkd: first reply"):
        assert any(line.startswith(label) for line in lines), (label, proc.stdout)
    verdicts = [line for line in lines if line.startswith(
        ("bundled first reply / python -c pass:", "greenstalk's rule, bundled:"))]
    assert len(verdicts) == 2 and all(("PASS" in v) != ("FAIL" in v) for v in verdicts), lines
    report = json.loads(out.read_text())
    assert len(report["python_pass"]) == 3 and min(report["python_pass"]) > 0
    bundled = report["kinds"]["bundled"]
    assert bundled["reply"]["median"] >= bundled["accept"]["median"] > 0
    # The command's one-second timeout starts once the server reads it: never sooner.
    assert min(bundled["greenstalk"]["runs"]) >= 0
