"""Smoke test of benchmarks/startup.py: a quick run measures every kind and prints the
ratios to ``python -c pass`` (speed is not asserted: the table is the benchmark's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import beanstalkd_path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")
@pytest.mark.timeout(300)  # a shared machine's load stretches the run
def test_quick_run_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "startup.py"), "--quick"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = r" +\d+\.\d +\d+\.\d +\d+\.\d +\d+\.\d\d$"
    for kind in ("python -c pass", "cmdstalk --help", "first worker waiting"):
        assert re.search(rf"^{re.escape(kind)}{figures}", out.stdout, re.M), out.stdout
    assert re.search(r"^first worker waiting / python -c pass: \d+\.\d\d \(target <= 3\)",
                     out.stdout, re.M), out.stdout  # fmt: skip
