"""Smoke test of benchmarks/spark_drain.py: a quick run drains the same jobs with cmdstalk,
cmdstalk-spark in local mode and on a standalone cluster, and prints both figures."""

from __future__ import annotations

import json
from pathlib import Path

from tests.spark.cluster import bench_marks, run_quick_bench

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "spark_drain.py"
RUNNERS = ("cmdstalk", "spark local", "spark cluster")

pytestmark = bench_marks()


def test_quick_run_compares_spark_drain_with_cmdstalk(tmp_path: Path) -> None:
    out = tmp_path / "drain.json"
    proc = run_quick_bench(BENCH, out)
    table = proc.stdout.split("load average after")[1].splitlines()
    assert "wall / cmdstalk" in table[1] and "busy / cmdstalk" in table[1], table
    rows = {name: next(line for line in table if line.startswith(name)) for name in RUNNERS}
    assert rows["spark local"].count("x") == 2 and rows["spark cluster"].count("x") == 2, rows
    saved = json.loads(out.read_text())
    assert saved["jobs"] == 100 and saved["brokers"] == 2
    assert sorted(s["runner"] for s in saved["samples"]) == sorted(RUNNERS)
    for sample in saved["samples"]:
        # Start-up is in the wall time only: the busy span is shorter, never longer.
        assert 0 < sample["busy_s"] < sample["wall_s"], sample
