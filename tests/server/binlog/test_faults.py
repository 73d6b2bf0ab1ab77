"""Write and fsync failures: errors are raised, nothing acknowledged is lost, the log heals."""

from __future__ import annotations

import contextlib
import errno
import os
import random
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import (
    Binlog,
    BinlogOptions,
    BinlogSyncError,
    BinlogWriteError,
    JobRecord,
)
from tests.server.binlog.faults import FaultyOps
from tests.server.binlog.model import Model, make_job

SYNC_EACH = BinlogOptions(fsync_ms=0, segment_size=4096)


def open_log(
    path: Path, model: Model, options: BinlogOptions = SYNC_EACH
) -> tuple[Binlog, FaultyOps]:
    ops = FaultyOps(str(path))
    return Binlog(str(path), options, ops=ops, lookup=model.lookup), ops


def put(log: Binlog, model: Model, rng: random.Random, size: int = 100) -> JobRecord:
    rec = make_job(model.next_id, rng)._replace(body=rng.randbytes(size))
    log.put(rec)
    model.jobs[rec.id] = rec
    model.next_id += 1
    return rec


def active_file(log: Binlog) -> Path:
    return Path(log.directory) / f"binlog.{log.stats().current_index}"


def assert_recovers(path: Path, model: Model) -> None:
    with Binlog(str(path), SYNC_EACH) as log:
        assert log.recovery.jobs == model.jobs
        assert log.recovery.next_id >= model.next_id


def test_disk_full_on_put_leaves_no_partial_record(tmp_path: Path) -> None:
    rng = random.Random(1)
    model = Model()
    log, ops = open_log(tmp_path, model)
    for _ in range(5):
        put(log, model, rng)
    log.sync()
    size = active_file(log).stat().st_size
    ops.inject("pwrite", errno.ENOSPC, partial=30)
    with pytest.raises(BinlogWriteError) as failed:
        log.put(make_job(model.next_id, rng))
    assert failed.value.disk_full
    assert "No space left" in str(failed.value) and str(active_file(log)) in str(failed.value)
    assert active_file(log).stat().st_size == size, "the partial record was cut back"
    # Space is back: the same id can be logged now (the engine never applied the failed put).
    put(log, model, rng)
    log.sync()
    log.close()
    assert_recovers(tmp_path, model)


def test_failed_cut_back_is_retried_before_the_next_write(tmp_path: Path) -> None:
    rng = random.Random(2)
    model = Model()
    log, ops = open_log(tmp_path, model)
    put(log, model, rng)
    ops.inject("pwrite", errno.EIO, partial=25)
    ops.inject("truncate", errno.EIO, times=2)
    with pytest.raises(BinlogWriteError):
        log.put(make_job(model.next_id, rng))
    with pytest.raises(BinlogWriteError, match="cut back"):
        log.delete(1)  # junk still after the last record: refuse rather than bury it
    log.delete(1)
    del model.jobs[1]
    put(log, model, rng)
    log.close()
    with Binlog(str(tmp_path), SYNC_EACH) as again:
        assert again.recovery.jobs == model.jobs
        assert again.recovery.clean, again.recovery.problems


def test_short_writes_are_completed(tmp_path: Path) -> None:
    rng = random.Random(3)
    model = Model()
    log, ops = open_log(tmp_path, model)
    ops.inject("pwrite", partial=7, short=True, times=3)
    put(log, model, rng, size=500)
    log.close()
    assert_recovers(tmp_path, model)


def test_disk_full_when_starting_a_segment_refuses_puts_but_not_deletes(tmp_path: Path) -> None:
    rng = random.Random(4)
    model = Model()
    log, ops = open_log(tmp_path, model)
    while log.stats().current_index == 1:
        put(log, model, rng, size=900)
    # Fill the current segment to the brim, then run out of room for the next one.
    first = log.stats().current_index
    while active_file(log).stat().st_size < SYNC_EACH.segment_size - 300:
        put(log, model, rng, size=200)
    ops.inject("open", errno.ENOSPC, times=100, path_contains="binlog.")
    with pytest.raises(BinlogWriteError) as failed:
        put(log, model, rng, size=900)
    model.next_id -= 1  # (put() counted it before the failure propagated)
    assert failed.value.disk_full
    for jid in list(model.jobs)[:10]:
        log.delete(jid)  # goes past the size limit instead of failing
        del model.jobs[jid]
    log.sync()
    assert log.stats().current_index == first
    ops.clear()
    put(log, model, rng, size=900)
    assert log.stats().current_index == first + 1
    log.close()
    assert_recovers(tmp_path, model)


def test_failed_fsync_relogs_touched_jobs_in_a_new_segment(tmp_path: Path) -> None:
    rng = random.Random(5)
    model = Model()
    log, ops = open_log(tmp_path, model)
    for _ in range(5):
        put(log, model, rng)
    log.sync()
    for _ in range(4):
        put(log, model, rng)
    log.delete(2)
    del model.jobs[2]
    before = log.stats().current_index
    # The fsync fails and the kernel drops the unsynced pages: the last 5 records are gone
    # from the old segment. sync() must still succeed by re-logging them elsewhere.
    ops.inject("fdatasync", errno.EIO, after_write=True)
    log.sync()
    assert log.stats().current_index == before + 1
    assert not log.needs_sync
    log.close()
    with Binlog(str(tmp_path), SYNC_EACH) as again:
        assert again.recovery.jobs == model.jobs


def test_fsync_failing_until_the_device_recovers(tmp_path: Path) -> None:
    rng = random.Random(6)
    model = Model()
    log, ops = open_log(tmp_path, model)
    put(log, model, rng)
    log.sync()
    ops.inject("fdatasync", errno.EIO, times=6, after_write=True)
    put(log, model, rng)
    with pytest.raises(BinlogSyncError, match="not durable"):
        log.sync()
    assert log.needs_sync
    # Nothing more may go into the tainted segment, and no new one can be made durable:
    # changes are refused (the server answers them with errors) until the disk recovers.
    with pytest.raises(BinlogWriteError):
        log.put(make_job(model.next_id, rng))
    with pytest.raises(BinlogSyncError):
        log.tick(1.0)
    ops.clear()
    put(log, model, rng)
    log.tick(2.0)
    assert not log.needs_sync
    log.close()
    assert_recovers(tmp_path, model)


def test_failed_fsync_without_lookup_cannot_relog(tmp_path: Path) -> None:
    ops = FaultyOps(str(tmp_path))
    log = Binlog(str(tmp_path), SYNC_EACH, ops=ops)
    log.put(make_job(1, random.Random(7)))
    ops.inject("fdatasync", errno.EIO)
    with pytest.raises(BinlogSyncError, match="no lookup"):
        log.sync()


def assert_each_job_at_or_after(
    got: dict[int, JobRecord], states: list[dict[int, JobRecord]]
) -> None:
    """Every job (present or absent) is as it was at the last sync or some time after.

    After a failed fsync the records since the last good one may survive in part, in any
    combination (pages are written back in no particular order), and are then re-logged:
    so each job is checked against its own history, not the whole state at once. An
    acknowledged change can never be undone: states before the sync are not candidates.
    """
    for jid in set(got) | {j for state in states for j in state}:
        options = [state.get(jid) for state in states]
        assert got.get(jid) in options, (
            f"job {jid}: recovered {got.get(jid)!r}, acknowledged {options[0]!r}"
        )


@pytest.mark.parametrize("seed", range(int(os.environ.get("BINLOG_FAULT_SEEDS", "12"))))
def test_random_faults_never_lose_acknowledged_records(tmp_path: Path, seed: int) -> None:
    """Random ENOSPC/EIO on every kind of operation, then a power cut: every job comes back
    as it was at the last successful sync or later, never earlier."""
    rng = random.Random(seed)
    model = Model()
    opts = BinlogOptions(
        fsync_ms=0, segment_size=rng.choice([1024, 4096]), compact_budget=3,
        preallocate=rng.choice([0, 0, 700]),
    )  # fmt: skip
    log, ops = open_log(tmp_path, model, opts)
    acked = 0
    now = 0.0
    for _ in range(300):
        if rng.random() < 0.08:
            op = rng.choice(["pwrite", "fdatasync", "open", "truncate", "unlink", "fsync_dir"])
            err = rng.choice([errno.ENOSPC, errno.EIO])
            ops.inject(op, err, times=rng.randint(1, 3), partial=rng.randint(0, 40),
                       after_write=rng.random() < 0.5)  # fmt: skip
        if rng.random() < 0.05:
            ops.clear()
        # A failed write is not applied by the engine; the model does not apply it either.
        with contextlib.suppress(BinlogWriteError):
            model.step(log, rng)
        if rng.random() < 0.3:
            now += 0.001
            try:
                log.tick(now)
                acked = len(model.history) - 1
            except BinlogSyncError:
                pass
    ops.kill()
    ops.power_cut(rng)
    with Binlog(str(tmp_path), SYNC_EACH) as again:
        assert_each_job_at_or_after(again.recovery.jobs, model.history[acked:])
        assert again.recovery.next_id >= model.next_history[acked]
    assert os.path.exists(tmp_path / "lock")
