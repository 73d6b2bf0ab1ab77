"""Smoke test of benchmarks/spark_enqueue.py: a quick run measures both Spark modes (local
and a standalone cluster it starts) against the putter and prints the table."""

from __future__ import annotations

import json
from pathlib import Path

from tests.spark.cluster import bench_marks, run_quick_bench

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "spark_enqueue.py"

pytestmark = bench_marks()


def test_quick_run_compares_both_modes_with_the_putter(tmp_path: Path) -> None:
    out = tmp_path / "enqueue.json"
    proc = run_quick_bench(BENCH, out)
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
