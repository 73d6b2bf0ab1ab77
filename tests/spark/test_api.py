"""The Python API as the README shows it, and the example a user runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def test_package_exports_the_api_without_importing_pyspark() -> None:
    code = (
        "import sys, cmdstalk_py.spark as s; assert 'pyspark' not in sys.modules; "
        "from cmdstalk_py.spark import enqueue, EnqueueFailed, register; "
        "print(enqueue.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "cmdstalk_py.spark.datasource", out


@pytest.mark.slow
def test_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "spark_quickstart.py"), "--rows", "500"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "enqueue(): 500 jobs" in out.stdout and "'reports': 2 ready" in out.stdout, out.stdout
    assert "pandas" not in out.stderr, out.stderr  # no version warning
