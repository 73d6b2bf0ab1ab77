"""Smoke test of benchmarks/responsive.py: its verdict, its parsing, and a quick run's table
(speed is not asserted)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import helpers

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "responsive.py"


def load_bench() -> ModuleType:
    return helpers.load_bench(BENCH, "responsive_bench")


def test_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()

    def condition(name: str, p99: float, unstarted: int = 0) -> object:
        # 100 probes: the nearest-rank p99 is the 99th smallest.
        return bench.Condition(name, [1.0] * 98 + [p99, 500.0], unstarted)

    assert bench.report(condition("quiet", 10.0), condition("floods", 20.0), 500)
    assert not bench.report(condition("quiet", 10.0), condition("floods", 20.1), 500)
    assert not bench.report(condition("quiet", 10.0), condition("floods", 5.0, 1), 500)
    out = capsys.readouterr().out
    assert "p99 floods / quiet: 2.00 (target <= 2, every probe started): PASS" in out
    assert "p99 floods / quiet: 2.01 (target <= 2, every probe started): FAIL" in out


def test_percentile_and_lag_parsing() -> None:
    bench = load_bench()
    assert bench.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert bench.percentile([3.0, 1.0, 2.0], 1.0) == 3.0
    assert math.isnan(bench.percentile([], 0.99))
    page = (
        "# HELP cmdstalk_loop_lag_seconds The longest ...\n"
        "# TYPE cmdstalk_loop_lag_seconds gauge\n"
        "cmdstalk_loop_lag_seconds 0.0125\n"
        "cmdstalk_loop_lag_seconds_other 9.0\n"
    )
    assert bench.loop_lag(page) == 0.0125
    assert bench.loop_lag("cmdstalk_jobs_total 3.0\n") is None


@pytest.mark.timeout(300)  # 20 sleepers and two floods on a shared two-core machine
def test_quick_run_prints_both_conditions() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout.split("responsiveness: 20 commands running")[1]
    # condition, probes (2 rounds x 5), late, p50, p95, p99, max, lag max, lag p50, warned,
    # cpu, wait
    row = r" +10 +0( +(\d+\.\d|nan)){6} +\d+ +\d+\.\d +\d+\.\d$"
    assert re.search(rf"^quiet{row}", table, re.M), out.stdout
    assert re.search(rf"^floods{row}", table, re.M), out.stdout
    assert re.search(r"^floods written .*: out \d+\.\d MiB/s, ctl \d+\.\d MiB/s$", table, re.M)
    assert re.search(r"^p99 floods / quiet: \d+\.\d\d \(target <= 2, .*\): (PASS|FAIL)$",
                     table, re.M), out.stdout  # fmt: skip
