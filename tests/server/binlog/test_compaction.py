"""Compaction: segments are reclaimed, live jobs copied in bounded steps, crash-safe."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogOptions, JobRecord, StoredState
from tests.server.binlog.faults import Crash, FaultyOps
from tests.server.binlog.model import T0, Model, make_job

SMALL = BinlogOptions(fsync_ms=50, segment_size=2048, compact_budget=4)


def settle(log: Binlog, now: float, step: float = 0.06, limit: int = 10_000) -> float:
    """Tick every ``step`` seconds until the binlog has nothing left to do."""
    for _ in range(limit):
        if log.next_deadline() is None:
            return now
        now += step
        log.tick(now)
    raise AssertionError("binlog maintenance never finished")


def test_fifo_drain_removes_segments_without_copying(tmp_path: Path) -> None:
    rng = random.Random(1)
    model = Model()
    with Binlog(str(tmp_path), SMALL, lookup=model.lookup) as log:
        for _ in range(200):
            rec = make_job(model.next_id, rng, tube=b"t")._replace(body=rng.randbytes(50))
            log.put(rec)
            model.jobs[rec.id] = rec
            model.next_id += 1
        assert log.stats().segments > 10
        for jid in range(1, 191):
            log.delete(jid)
            del model.jobs[jid]
        settle(log, 0.0)
        stats = log.stats()
        # Only the survivors may be copied (to free the segments they pinned).
        assert stats.records_migrated <= len(model.jobs)
        assert stats.segments <= 2
    with Binlog(str(tmp_path), SMALL) as log:
        assert log.recovery.jobs == model.jobs


def _pinned_log(path: Path, pinned: int = 12, churn: int = 400) -> Model:
    """Long-lived jobs at the start of the log, then lots of put/delete churn."""
    rng = random.Random(2)
    model = Model()
    opts = BinlogOptions(fsync_ms=0, segment_size=2048)
    with Binlog(str(path), opts, lookup=model.lookup) as log:
        for _ in range(pinned):
            rec = make_job(model.next_id, rng, tube=b"keep")._replace(body=rng.randbytes(60))
            log.put(rec)
            model.jobs[rec.id] = rec
            model.next_id += 1
        for i in range(churn):
            rec = make_job(model.next_id, rng, tube=b"churn")._replace(body=rng.randbytes(40))
            log.put(rec)
            model.next_id += 1
            log.delete(rec.id)
            if i % 50 == 0:  # the pinned jobs change state now and then
                jid = rng.randrange(1, pinned + 1)
                upd = model.jobs[jid]._replace(state=StoredState.BURIED, buries=i)
                log.update(upd)
                model.jobs[jid] = upd
    return model


def test_pinned_segments_are_compacted(tmp_path: Path) -> None:
    model = _pinned_log(tmp_path)
    with Binlog(str(tmp_path), SMALL, lookup=model.lookup) as log:
        before = log.stats()
        assert before.total_bytes > 2 * before.live_bytes
        settle(log, 0.0)
        after = log.stats()
        assert after.records_migrated >= len(model.jobs)
        assert after.total_bytes <= 2 * after.live_bytes + SMALL.segment_size
        assert after.segments < before.segments
    with Binlog(str(tmp_path), SMALL) as log:
        assert log.recovery.jobs == model.jobs
        assert log.recovery.next_id == model.next_id
        assert log.recovery.clean


def test_compaction_step_is_bounded(tmp_path: Path) -> None:
    rng = random.Random(3)
    model = Model()
    opts = BinlogOptions(fsync_ms=None, segment_size=1 << 20, compact_budget=25)
    with Binlog(str(tmp_path), opts, lookup=model.lookup) as log:
        for jid in range(1, 3001):
            rec = JobRecord(jid, b"t", rng.randbytes(300), 1, 60, 0, StoredState.READY, T0, 0.0)
            log.put(rec)
            if jid % 3 == 0:
                model.jobs[jid] = rec
            else:
                log.delete(jid)
        log.put(JobRecord(3001, b"t", b"x" * (1 << 20), 1, 60, 0, StoredState.READY, T0, 0.0))
        log.delete(3001)  # forces a new segment and makes the old ones mostly dead
        assert log.stats().segments >= 2
        written = log.stats().records_written
        log.tick(1.0)
        assert log.stats().records_written - written <= 25
        settle(log, 1.0)
        assert log.stats().records_migrated == 1000
    with Binlog(str(tmp_path), opts) as log:
        assert log.recovery.jobs == model.jobs


@pytest.fixture(scope="module")
def compaction_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Model, int]:
    """A fully synced log where compaction is due, and the steps a full run takes."""
    path = tmp_path_factory.mktemp("template")
    model = _pinned_log(path, pinned=6, churn=150)
    probe = tmp_path_factory.mktemp("probe") / "d"
    shutil.copytree(path, probe)
    ops = FaultyOps(str(probe))
    with Binlog(str(probe), SMALL, ops=ops, lookup=model.lookup) as log:
        assert log.stats().records_migrated == 0
        settle(log, 0.0, step=0.01)
        assert log.stats().records_migrated >= 6
        steps = ops.steps
    ops_names = {op for op, _ in ops.trace}
    assert {"pwrite", "fdatasync", "unlink", "fsync_dir", "open"} <= ops_names
    return path, model, steps


@pytest.mark.parametrize("power_loss", [False, True], ids=["crash", "power-loss"])
def test_crash_at_every_step_of_compaction(
    tmp_path: Path, compaction_template: tuple[Path, Model, int], power_loss: bool
) -> None:
    """Whatever step a crash interrupts (open, copy, fsync, unlink), nothing changes."""
    template, model, steps = compaction_template
    rng = random.Random(9)
    for crash_at in range(1, steps + 1):
        directory = tmp_path / f"c{crash_at}"
        shutil.copytree(template, directory)
        ops = FaultyOps(str(directory), crash_at=crash_at)
        with pytest.raises(Crash):
            log = Binlog(str(directory), SMALL, ops=ops, lookup=model.lookup)
            # Ticks closer together than fsync_ms: the policy alone would not fsync the
            # copies before their old segment goes; compaction must.
            settle(log, 0.0, step=0.01)
            log.close()
        ops.kill()
        if power_loss:
            ops.power_cut(rng)
        with Binlog(str(directory), SMALL, lookup=model.lookup) as log:
            assert log.recovery.jobs == model.jobs, f"crash at step {crash_at}: {ops.trace[-1]}"
            assert log.recovery.next_id == model.next_id
            settle(log, 0.0)  # and the interrupted compaction can finish
        with Binlog(str(directory), SMALL) as log:
            assert log.recovery.jobs == model.jobs
