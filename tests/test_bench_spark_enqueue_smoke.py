"""Smoke test of benchmarks/spark_enqueue.py: a quick run measures both Spark modes (local
and a standalone cluster it starts) against the putter and prints the table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import beanstalkd_path
from tests.spark.cluster import java_missing

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "spark_enqueue.py"

pytestmark = [
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found"),
    pytest.mark.skipif(java_missing(), reason="Java not found: Spark needs a JDK (17+)"),
]


def test_quick_run_compares_both_modes_with_the_putter(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    out = tmp_path / "enqueue.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout.rsplit("/ putter", 1)[0].rsplit("load average after", 1)[1]
    for mode in ("local", "cluster"):
        for method in ("spark data source", "putter", "greenstalk loop"):
            assert any(
                line.split()[:1] == [mode] and method in line for line in table.splitlines()
            ), table
    results = json.loads(out.read_text())
    assert set(results) == {"local", "cluster"}
    assert results["local"]["master"] == "local[2]"
    assert results["cluster"]["master"].startswith("spark://127.0.0.1:")
    for result in results.values():
        for rates in result["samples"].values():
            assert len(rates) == 1 and rates[0] > 0, result
