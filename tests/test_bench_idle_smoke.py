"""Smoke test of benchmarks/idle.py: a quick run prints every figure or says why it skipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import helpers

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "idle.py"


def load_bench() -> ModuleType:
    return helpers.load_bench(BENCH, "idle_bench")


def test_go_is_skipped_with_a_reason_when_it_cannot_be_had(tmp_path: Path) -> None:
    go_cmdstalk = load_bench().go_cmdstalk
    path, why = go_cmdstalk(str(tmp_path / "absent"), tmp_path, tmp_path)
    assert path is None and "is not an executable" in why
    path, why = go_cmdstalk(None, tmp_path / "no-sources", tmp_path)
    assert path is None and ("no-sources" in why or "no `go`" in why)


@pytest.mark.slow
def test_quick_run_prints_every_figure() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--seconds", "0.5"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("bundled ") and "cmdstalk --per-tube 2" in line for line in lines)
    # Each mode is measured or skipped with its reason, never silently left out.
    for mode, row in (("workers", "cmdstalk --workers 20"), ("go", "Go cmdstalk -per-tube=2")):
        assert any(row in line for line in lines) or any(
            line.startswith(f"skipped {mode}: ") for line in lines
        ), out.stdout
