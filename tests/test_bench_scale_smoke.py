"""Smoke test of benchmarks/scale.py: a quick run prints its table, the asyncio floor's row
too (speed is not asserted), and its tube set-up leaves one delayed job in each tube."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import greenstalk
import pytest

from tests.helpers import beanstalkd_path, running_beanstalkd

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
needs_beanstalkd = pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/scale.py as a module (it imports its siblings idle and server_procs)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("scale")


@needs_beanstalkd
@pytest.mark.timeout(600)  # a shared machine's load stretches the run
def test_quick_run_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "scale.py"), "--quick", "--minimal"],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout.split("scale: 20 tubes (+ default) x 2 per tube")[1]
    # supervisor, workers (20 tubes and default, 2 each), start s, threads, RSS MiB,
    # supervisor %, server %
    row = r" +42 +\d+\.\d\d +\d+ +\d+\.\d +\d+\.\d\d +\d+\.\d\d$"
    assert re.search(rf"^cmdstalk -all -per-tube=2{row}", table, re.M), out.stdout
    assert re.search(rf"^asyncio minimal, 2 per tube{row}", table, re.M), out.stdout
    assert re.search(r"^targets: threads \d+ \(<= 16\)$", table, re.M), out.stdout
    if "skipped Go cmdstalk: " not in out.stdout:
        assert re.search(rf"^Go cmdstalk -all -per-tube=2{row}", table, re.M), out.stdout
        assert re.search(r"^to Go: start \d+\.\d\d x .* RSS \d+\.\d\d x", table, re.M)


@needs_beanstalkd
def test_each_tube_gets_one_delayed_job(bench: ModuleType) -> None:
    with running_beanstalkd() as server:
        listed = bench.make_tubes((server.host, server.port), 3)
        assert listed == 4  # and default
        with greenstalk.Client((server.host, server.port)) as client:
            for tube in ("scale0000", "scale0001", "scale0002"):
                stats = client.stats_tube(tube)
                assert (stats["current-jobs-delayed"], stats["current-jobs-ready"]) == (1, 0)
