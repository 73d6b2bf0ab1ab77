"""Every mutation survives a restart; ids never repeat; reopen cycles under a random load."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogOptions, JobRecord, StoredState
from tests.server.binlog.model import T0, Model, make_job

NEVER = BinlogOptions(fsync_ms=None)


def reopen(path: Path, options: BinlogOptions = NEVER) -> Binlog:
    return Binlog(str(path), options)


def test_empty_directory_starts_at_id_1(tmp_path: Path) -> None:
    with reopen(tmp_path / "new") as b:
        assert b.recovery.jobs == {}
        assert b.recovery.next_id == 1
        assert b.recovery.clean
    assert sorted(os.listdir(tmp_path / "new")) == ["binlog.1", "lock"]


def test_put_update_delete_round_trip(tmp_path: Path) -> None:
    a = JobRecord(1, b"default", b"hello", 100, 60, 0, StoredState.READY, T0, 0.0)
    b_ = JobRecord(2, b"other", b"\x00\r\n\xff" * 3, 0, 1, 30, StoredState.DELAYED, T0, T0 + 30)
    c = JobRecord(3, b"default", b"", 5, 5, 0, StoredState.READY, T0 + 1, 0.0)
    with reopen(tmp_path) as log:
        for rec in (a, b_, c):
            log.put(rec)
        released = a._replace(pri=7, delay=12, state=StoredState.DELAYED, deadline=T0 + 99,
                              reserves=1, releases=1)  # fmt: skip
        log.update(released)
        log.delete(3)
    with reopen(tmp_path) as log:
        assert log.recovery.jobs == {1: released, 2: b_}
        assert log.recovery.next_id == 4
        assert log.recovery.clean


def test_restart_preserves_every_field(tmp_path: Path) -> None:
    """States, priorities, TTRs, binary bodies, wall-clock times and counters come back."""
    jobs = [
        JobRecord(1, b"default", bytes(range(256)), 0, 1, 0, StoredState.READY, T0, 0.0,
                  reserves=3, timeouts=2, releases=1, buries=0, kicks=0),
        JobRecord(2, b"delayed", b"d", 2**32 - 1, 2**32 - 1, 3600, StoredState.DELAYED,
                  T0 + 0.123456, T0 + 3600.123456),
        JobRecord(3, b"buried", os.urandom(100_000), 1024, 120, 0, StoredState.BURIED, T0, 0.0,
                  reserves=1, buries=1, kicks=0),
        JobRecord(4, b"odd-tube_+;$()", b"\r\n", 1023, 60, 10, StoredState.READY, T0, 0.0,
                  reserves=9, timeouts=9, releases=9, buries=9, kicks=9),
        JobRecord(5, b"big", b"\xab" * (1 << 20), 5, 5, 0, StoredState.READY, T0, 0.0),
    ]  # fmt: skip
    with reopen(tmp_path) as log:
        for rec in jobs:
            log.put(rec)
    for _ in range(3):  # restart repeatedly: recovery itself must not change anything
        with reopen(tmp_path) as log:
            assert list(log.recovery.jobs.values()) == jobs
            for rec in log.recovery.jobs.values():
                assert type(rec.state) is StoredState
            assert log.recovery.next_id == 6


def test_ids_never_repeat_after_everything_is_deleted_and_compacted(tmp_path: Path) -> None:
    opts = BinlogOptions(fsync_ms=None, segment_size=2048)
    model = Model()
    with reopen(tmp_path, opts) as log:
        log.lookup = model.lookup
        rng = random.Random(1)
        for _ in range(60):
            rec = make_job(model.next_id, rng, tube=b"t")._replace(body=b"x" * 100)
            log.put(rec)
            model.next_id += 1
        for jid in range(1, 61):
            log.delete(jid)
        log.tick(1.0)
    # Every segment holding id 60 is gone: only the header floors remember it.
    with reopen(tmp_path, opts) as log:
        assert log.recovery.jobs == {}
        assert log.recovery.next_id == 61
        log.lookup = model.lookup
        log.tick(1.0)
        assert log.stats().segments == 1
    with reopen(tmp_path, opts) as log:
        assert log.recovery.next_id == 61
        assert log.recovery.clean


def test_put_of_ids_with_gaps_keeps_highest(tmp_path: Path) -> None:
    # The engine consumes ids for puts that never reach the log (EXPECTED_CRLF).
    rng = random.Random(2)
    with reopen(tmp_path) as log:
        log.put(make_job(10, rng))
        log.put(make_job(500, rng))
        log.delete(500)
        assert log.next_id == 501
    with reopen(tmp_path) as log:
        assert set(log.recovery.jobs) == {10}
        assert log.recovery.next_id == 501


@pytest.mark.parametrize("fsync_ms", [None, 0, 50])
def test_random_load_across_many_restarts(tmp_path: Path, fsync_ms: int | None) -> None:
    rng = random.Random(fsync_ms or 7)
    opts = BinlogOptions(fsync_ms=fsync_ms, segment_size=8192, compact_budget=5,
                         preallocate=2048 if fsync_ms == 0 else 0)  # fmt: skip
    model = Model()
    now = 0.0
    for _cycle in range(8):
        with reopen(tmp_path, opts) as log:
            assert log.recovery.jobs == model.jobs
            assert log.recovery.clean, log.recovery.problems
            assert log.recovery.next_id >= model.next_id
            model.next_id = log.recovery.next_id
            log.lookup = model.lookup
            for _ in range(rng.randint(20, 150)):
                model.step(log, rng, put_weight=rng.choice([0.3, 0.5, 0.7]))
                if rng.random() < 0.3:
                    now += 0.02
                    log.tick(now)
    with reopen(tmp_path, opts) as log:
        assert log.recovery.jobs == model.jobs


def test_file_of_names_the_segment_holding_the_job(tmp_path: Path) -> None:
    rng = random.Random(3)
    with reopen(tmp_path, BinlogOptions(fsync_ms=None, segment_size=4096)) as log:
        log.put(make_job(1, rng)._replace(body=b"a" * 3000))
        log.put(make_job(2, rng)._replace(body=b"b" * 3000))
        assert (log.file_of(1), log.file_of(2)) == (1, 2)
        assert log.file_of(3) == 0
        log.delete(1)
        assert log.file_of(1) == 0
        stats = log.stats()
        assert (stats.oldest_index, stats.current_index, stats.live_jobs) == (1, 2, 1)


def test_restarts_without_traffic_do_not_pile_up_segments(tmp_path: Path) -> None:
    rng = random.Random(4)
    model = Model()
    with reopen(tmp_path) as log:
        rec = make_job(1, rng)
        log.put(rec)  # one long-lived job pins the oldest segment
        model.jobs[1] = rec
        model.next_id = 2
    for i in range(10):
        with reopen(tmp_path) as log:
            log.lookup = model.lookup
            log.tick(float(i))
            assert log.recovery.jobs == model.jobs
            assert log.recovery.clean, log.recovery.problems
            assert log.recovery.next_id == 2
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("binlog."))
    assert names == ["binlog.1", "binlog.11"]
