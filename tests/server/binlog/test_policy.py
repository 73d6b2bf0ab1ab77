"""fsync policy driven by the caller's clock: group commit, at most every N ms, never."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogClosedError, BinlogOptions
from cmdstalk_py.server.binlog.log import LAZY_SYNC
from tests.server.binlog.faults import FaultyOps
from tests.server.binlog.model import Model, make_job


def open_counting(path: Path, fsync_ms: int | None) -> tuple[Binlog, FaultyOps, Model]:
    model = Model()
    ops = FaultyOps(str(path))
    log = Binlog(str(path), BinlogOptions(fsync_ms=fsync_ms), ops=ops, lookup=model.lookup)
    return log, ops, model


def test_fsync_0_is_one_group_commit_per_tick(tmp_path: Path) -> None:
    log, ops, model = open_counting(tmp_path, 0)
    rng = random.Random(1)
    assert log.next_deadline() is None and not log.needs_sync
    for _ in range(25):  # one event-loop iteration's worth of pipelined commands
        model.step(log, rng)
    assert log.needs_sync and log.next_deadline() == 0.0
    before = ops.fsyncs
    log.tick(10.0)
    assert ops.fsyncs == before + 1
    assert not log.needs_sync and log.next_deadline() is None
    log.tick(10.001)  # nothing new: no fsync
    assert ops.fsyncs == before + 1
    log.close()


def test_fsync_0_lazy_records_do_not_hold_replies(tmp_path: Path) -> None:
    log, ops, model = open_counting(tmp_path, 0)
    rng = random.Random(4)
    rec = make_job(1, rng)
    log.put(rec)
    model.jobs[1] = rec
    assert log.replies_wait
    log.tick(10.0)
    base = ops.fsyncs
    # A reserve: written at once, but no reply waits for its fsync.
    log.update(rec._replace(reserves=1), urgent=False)
    assert log.needs_sync and not log.replies_wait
    assert log.next_deadline() == pytest.approx(10.0 + LAZY_SYNC)
    log.tick(10.01)
    assert ops.fsyncs == base
    log.tick(10.0 + LAZY_SYNC)
    assert ops.fsyncs == base + 1 and not log.needs_sync
    # A lazy record followed by an urgent one: one group commit covers both, at once.
    log.update(rec._replace(reserves=2), urgent=False)
    log.delete(1)
    assert log.replies_wait and log.next_deadline() == 0.0
    log.tick(10.06)
    assert ops.fsyncs == base + 2 and not log.needs_sync
    log.close()
    with Binlog(str(tmp_path), BinlogOptions(fsync_ms=0)) as again:
        assert again.recovery.jobs == {}


def test_fsync_ms_syncs_at_most_every_interval(tmp_path: Path) -> None:
    log, ops, model = open_counting(tmp_path, 50)
    rng = random.Random(2)
    model.step(log, rng)
    base = ops.fsyncs
    log.tick(100.0)  # first write after a long quiet time: due at once
    assert ops.fsyncs == base + 1
    model.step(log, rng)
    assert log.next_deadline() == pytest.approx(100.05)
    log.tick(100.01)
    log.tick(100.049)
    assert ops.fsyncs == base + 1 and log.needs_sync
    log.tick(100.05)
    assert ops.fsyncs == base + 2 and not log.needs_sync
    assert log.next_deadline() is None
    log.close()


def test_close_syncs_what_is_pending(tmp_path: Path) -> None:
    log, ops, model = open_counting(tmp_path, 50)
    model.step(log, random.Random(3))
    base = ops.fsyncs
    log.close()
    assert ops.fsyncs == base + 1
    with pytest.raises(BinlogClosedError):
        log.put(make_job(99, random.Random(4)))


def test_never_does_not_fsync(tmp_path: Path) -> None:
    log, ops, model = open_counting(tmp_path, None)
    rng = random.Random(5)
    for i in range(200):
        model.step(log, rng)
        log.tick(float(i))
    assert log.next_deadline() is None or log.next_deadline() == 0.0
    log.close()
    assert ops.fsyncs == 0
    assert not [op for op, _ in ops.trace if op in ("fdatasync", "fsync_dir")]
    with Binlog(str(tmp_path), BinlogOptions(fsync_ms=None)) as again:
        assert again.recovery.jobs == model.jobs


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fsync_ms": -1},
        {"segment_size": 10},
        {"compact_ratio": 1.0},
        {"compact_budget": 0},
    ],
)
def test_invalid_options_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BinlogOptions(**kwargs)  # type: ignore[arg-type]


def test_maintenance_error_backs_off_and_is_retried(tmp_path: Path) -> None:
    model = Model()
    ops = FaultyOps(str(tmp_path))
    opts = BinlogOptions(fsync_ms=None, segment_size=1024)
    log = Binlog(str(tmp_path), opts, ops=ops, lookup=model.lookup)
    rng = random.Random(6)
    for _ in range(30):
        model.step(log, rng, put_weight=1.0)
    for jid in list(model.jobs):
        log.delete(jid)
    assert log.next_deadline() == 0.0  # old segments to remove
    ops.inject("unlink", errno.EIO)
    log.tick(5.0)
    assert log.stats().segments > 1
    assert log.next_deadline() == 6.0  # one second of back-off, then again
    log.tick(5.5)
    assert log.stats().segments > 1
    log.tick(6.0)
    while log.next_deadline() == 0.0:
        log.tick(6.0)
    assert log.stats().segments == 1
    log.close()
