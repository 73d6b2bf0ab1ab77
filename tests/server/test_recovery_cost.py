"""Recovery's cost: the log read without the cyclic garbage collector.

Reading the log and rebuilding the jobs make nothing but long-lived objects without
cycles; a cyclic garbage collection meanwhile only walks what was made so far, again and
again. Recovery (``Binlog``, and ``Assembly.open`` with a binlog directory, which also
rebuilds the jobs) therefore runs with the collector paused and gives it back as it found
it. Timed figures: benchmarks/README.md.
"""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from cmdstalk_py.server.assembly import Assembly
from cmdstalk_py.server.binlog import Binlog, BinlogOptions, JobRecord, StoredState
from cmdstalk_py.server.config import ServerConfig

JOBS = 20_000


@pytest.fixture(scope="module")
def logged() -> Iterator[str]:
    """A binlog directory holding ``JOBS`` ready jobs (and a few deleted ones)."""
    with tempfile.TemporaryDirectory() as directory:
        binlog = Binlog(directory, BinlogOptions(fsync_ms=None))
        try:
            for i in range(1, JOBS + 11):
                binlog.put(JobRecord(i, b"recovered", b"job %d\r\n" % i, i % 7, 60, 0,
                                     StoredState.READY, 1.0, 0.0))  # fmt: skip
            for i in range(JOBS + 1, JOBS + 11):
                binlog.delete(i)
        finally:
            binlog.close()
        yield directory


class Collections:
    """Counts the cyclic collector's runs while installed in ``gc.callbacks``."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self.runs += 1


def _recover(directory: str) -> tuple[int, int]:
    """(jobs rebuilt, collections during recovery) of a server opened on ``directory``."""
    counter = Collections()
    gc.callbacks.append(counter)
    try:
        assembly = Assembly.open(ServerConfig(binlog_dir=directory, fsync_ms=None))
    finally:
        gc.callbacks.remove(counter)
    try:
        return len(assembly.engine.jobs), counter.runs
    finally:
        assembly.close()


def test_recovery_runs_without_the_collector_and_gives_it_back(logged: str) -> None:
    assert gc.isenabled()
    jobs, collections = _recover(logged)
    assert jobs == JOBS
    # At most the one the collector owes once it is back (with it, one per few hundred
    # objects made: dozens here).
    assert collections <= 1, collections
    assert gc.isenabled()


def test_the_binlog_alone_recovers_without_the_collector(logged: str) -> None:
    """``Binlog`` opened by other code than the server (tools, tests) recovers the same way."""
    counter = Collections()
    gc.callbacks.append(counter)
    try:
        binlog = Binlog(logged, BinlogOptions(fsync_ms=None))
    finally:
        gc.callbacks.remove(counter)
    try:
        assert len(binlog.recovery.jobs) == JOBS
        assert counter.runs <= 1, counter.runs
        assert gc.isenabled()
    finally:
        binlog.close()


def test_a_disabled_collector_stays_disabled(logged: str) -> None:
    gc.disable()
    try:
        jobs, _collections = _recover(logged)
        assert jobs == JOBS
        assert not gc.isenabled()
    finally:
        gc.enable()
