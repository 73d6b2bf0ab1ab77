"""Smoke test of benchmarks/drain.py: a tiny run of every figure, and its polling policy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import helpers
from tests.helpers import beanstalkd_path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "drain.py"


def load_bench() -> ModuleType:
    return helpers.load_bench(BENCH, "drain_bench")


def test_polls_sparsely_until_the_last_jobs() -> None:
    next_poll = load_bench().next_poll
    assert next_poll(200, None, 0.001, 1.0) == 0.001  # no rate known yet: the floor
    assert next_poll(200, 0.003, 0.001, 1.0) == pytest.approx(0.4 * 200 * 0.003)
    assert next_poll(1, 0.003, 0.001, 1.0) == pytest.approx(0.0012)
    assert next_poll(1, 0.0001, 0.001, 1.0) == 0.001  # never below the floor
    # A rate measured over 30 ms is not slept on for a second: at most what was watched.
    assert next_poll(990, 0.003, 0.01, 0.03) == pytest.approx(0.03)
    assert next_poll(990, 0.003, 0.01, 0.0) == 0.01


def test_a_rate_from_one_job_does_not_oversleep_the_end() -> None:
    """A drain of 1000 jobs at 3 ms each whose first job is seen 10 ms after the clock
    started (the drain's first poll after the unpause often sees just that one)."""
    per_job, count, first = 0.003, 1000, 0.010

    def done_at(t: float) -> int:
        return 0 if t < first else min(count, 1 + int((t - first) / per_job))

    watch = load_bench().EndWatch(count, 0.01, None, 0.0, 0)
    now, polls = 0.0, 0
    while not watch.finished:
        now += watch.sleep()
        watch.seen(now, done_at(now))
        polls += 1
    end = first + (count - 1) * per_job
    assert end <= now < 1.02 * end  # seen late by under 2 %
    assert polls < 30  # and still sparingly


@pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")
def test_tiny_run_prints_every_figure() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--jobs", "40", "--batch", "20", "--repeat", "1",
         "--modes", "cli,loop,go", "--per-tube", "1", "--workers", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = out.stdout.split("medians over 1 round(s)")[1]
    for name in ("cli/1 drain", "cli/1 paired", "loop/1 drain", "loop/1 paired"):
        assert name in summary, out.stdout
    # Against the raw 1-thread spawn: a drain each, and paired batches each.
    shared = ("cli-workers/1", "cli-per-tube/1", "cli-workers/1 paired", "cli-per-tube/1 paired")
    for name in shared:
        assert name in summary and "x raw N-thread spawn" in summary, out.stdout
    assert "x raw, paired" in summary
    assert "µs/job in the workers' process" in summary
    # Go cmdstalk, the reference for CPU per job: measured like ours where it can be built
    # (go and its snapshots on this machine), else skipped with the reason.
    if "skipping the go mode: " not in out.stdout:
        assert "go/1 drain" in summary and "go/1 paired" in summary, out.stdout
        assert re.search(r"go/1 +CPU +\d+ µs/job", summary), out.stdout
