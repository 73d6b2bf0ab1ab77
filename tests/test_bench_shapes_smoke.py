"""Smoke test of benchmarks/shapes.py: a quick run names every shape with a ratio to raw;
the poll loop's reply framing; a failing command stops a drain at once."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest

from cmdstalk_py.client.errors import NotFound
from tests.helpers import beanstalkd_path, running_beanstalkd

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SHAPES = ("raw", "threads", "poll-loop", "poll-loop-full")
needs_beanstalkd = pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/shapes.py as a module (it imports its siblings drain and shapes_loop)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("shapes")


@needs_beanstalkd
def test_quick_run_names_each_shape_with_a_ratio() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "shapes.py"), "--quick"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    summary = out.stdout.split("medians over 1 round(s)")[1]
    for name in SHAPES:
        # name, jobs/s, x raw, CPU µs/job (ours, commands, beanstalkd), CPU x raw, each round's
        number, ratio = r"\d+\.\d", r"(\d+\.\d\d)"
        row = re.search(
            rf"^  {name} +{number} +{ratio} +\d+ +\d+ +\d+ +{ratio}  \({ratio}\)$", summary, re.M
        )
        assert row is not None, out.stdout
        assert all(float(value) > 0 for value in row.groups())
    assert "raw                " in summary and "1.00" in summary


@needs_beanstalkd
@pytest.mark.slow
def test_ablation_names_each_feature_left_out() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "shapes.py"), "--ablate", "--jobs", "20",
         "--rounds", "1"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    summary = out.stdout.split("medians over 1 round(s)")[1]
    for feature in ("env", "group", "log", "pipes", "sentinel", "stats"):
        assert re.search(rf"^  full -{feature} +\d+\.\d +\d+\.\d\d", summary, re.MULTILINE), (
            out.stdout
        )


def test_replies_are_split_once_whole(bench: ModuleType) -> None:
    split_reply = sys.modules["shapes_loop"].split_reply
    assert split_reply(b"RESERVED 7 3\r\nab", b"RESERVED", 2, True) is None
    assert split_reply(b"RESERVED 7 3\r\nabc\r", b"RESERVED", 2, True) is None
    assert split_reply(b"RESERVED 7 3\r\nabc\r\nX", b"RESERVED", 2, True) == (
        [b"7", b"3"], b"abc", b"X",
    )  # fmt: skip
    assert split_reply(b"DELETED", b"DELETED", 0, False) is None
    assert split_reply(b"DELETED\r\n", b"DELETED", 0, False) == ([], b"", b"")
    with pytest.raises(NotFound):
        split_reply(b"NOT_FOUND\r\n", b"DELETED", 0, False)


@needs_beanstalkd
@pytest.mark.parametrize("runner", ["BareRunner", "FullRunner"])
def test_a_failing_command_stops_the_drain_at_once(bench: ModuleType, runner: str) -> None:
    make_runner = partial(getattr(sys.modules["shapes_loop"], runner), argv=["/bin/false"])
    shape = partial(bench.poll_loop_workers, make_runner=make_runner)
    with running_beanstalkd() as server:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="exited with 1"):
            bench.drain_queue(server, bench.CpuMeter(server), shape, 2, 20)
        assert time.monotonic() - started < 30  # not the drain's 600 s timeout
