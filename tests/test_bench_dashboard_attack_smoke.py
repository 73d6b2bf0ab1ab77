"""Smoke test of benchmarks/dashboard_attack.py: the verdicts, and a quick run's table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import helpers

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "dashboard_attack.py"


def load_bench() -> ModuleType:
    return helpers.load_bench(BENCH, "dashboard_attack_bench")


def test_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()

    def phase(name: str, p99: float, failed: int = 0, late: int = 0) -> object:
        return bench.Phase(name, 100, failed, late, 2.0, p99, p99, 5.0, {})

    assert bench.report([phase("quiet", 3.0), phase("idle", 9.9), phase("flood", 1.0)])
    assert not bench.report([phase("quiet", 10.0), phase("flood", 20.1)])  # over 2x
    assert not bench.report([phase("quiet", 10.0), phase("idle", 10.0, failed=1)])
    assert not bench.report([phase("quiet", 10.0), phase("flood", 10.0, late=1)])
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_run_prints_every_phase() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--seconds", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split()[0] for line in out.stdout.splitlines()]
    assert rows[:4] == ["phase", "quiet", "idle", "poll"], out.stdout
