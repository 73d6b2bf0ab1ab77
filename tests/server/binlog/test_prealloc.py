"""Preallocated segments: zeros ahead of the records are a clean end, never damage."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogOptions, BinlogWriteError
from cmdstalk_py.server.binlog.header import HEADER_SIZE
from tests.server.binlog.faults import FaultyOps
from tests.server.binlog.model import Model, make_job

PRE = BinlogOptions(fsync_ms=0, segment_size=8192, preallocate=4096)


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("binlog.*"), key=lambda p: int(p.suffix[1:]))


def fill(path: Path, count: int, ops: FaultyOps) -> tuple[Binlog, Model]:
    rng = random.Random(count)
    model = Model()
    log = Binlog(str(path), PRE, ops=ops, lookup=model.lookup)
    for _ in range(count):
        model.step(log, rng, put_weight=0.7)
    log.tick(1.0)
    return log, model


def test_records_overwrite_preallocated_zeros(tmp_path: Path) -> None:
    ops = FaultyOps(str(tmp_path))
    log, model = fill(tmp_path, 20, ops)
    active = segments(tmp_path)[-1]
    stats = log.stats()
    valid = stats.total_bytes - sum(p.stat().st_size for p in segments(tmp_path)[:-1])
    # The file is longer than its records: the rest is zeros, written and synced ahead.
    data = active.read_bytes()
    assert len(data) >= valid + 2048
    assert not data[valid:].strip(b"\0")
    log.close()
    # A clean close trims the zeros.
    assert active.stat().st_size == valid
    with Binlog(str(tmp_path), PRE) as again:
        assert again.recovery.jobs == model.jobs
        assert again.recovery.clean


def test_crash_leaves_zeros_that_recovery_reads_as_a_clean_end(tmp_path: Path) -> None:
    ops = FaultyOps(str(tmp_path))
    _log, model = fill(tmp_path, 30, ops)
    ops.kill()  # no close: the zeros stay
    assert any(p.read_bytes().endswith(b"\0" * 1024) for p in segments(tmp_path))
    with Binlog(str(tmp_path), PRE) as again:
        assert again.recovery.jobs == model.jobs
        assert again.recovery.clean, again.recovery.problems
    # Trimmed by the recovery: nothing but records is left in the old segments.
    for seg in segments(tmp_path)[:-1]:
        assert not seg.read_bytes().endswith(b"\0" * 64)


def test_every_cut_of_a_preallocated_segment_recovers_a_prefix(tmp_path: Path) -> None:
    rng = random.Random(3)
    src = tmp_path / "src"
    ops = FaultyOps(str(src))
    model = Model()
    log = Binlog(str(src), BinlogOptions(fsync_ms=0, segment_size=1 << 20, preallocate=8192),
                 ops=ops, lookup=model.lookup)  # fmt: skip
    for _ in range(40):
        model.step(log, rng, put_weight=0.7)
    valid = log.stats().total_bytes
    ops.kill()
    (data,) = [p.read_bytes() for p in segments(src)]
    assert len(data) > valid + 1024 and not data[valid:].strip(b"\0")
    directory = tmp_path / "d"
    for cut in sorted({*rng.sample(range(HEADER_SIZE, len(data) + 1), 120), valid, len(data)}):
        directory.mkdir(exist_ok=True)
        for name in os.listdir(directory):
            os.unlink(directory / name)
        # A tear in the records, then whatever zeros follow on disk.
        torn = data[:cut] + bytes(len(data) - cut) if cut < valid else data[:cut]
        (directory / "binlog.1").write_bytes(torn)
        with Binlog(str(directory), PRE, ops=FaultyOps(str(directory))) as again:
            assert again.recovery.jobs in model.history, cut
            if cut >= valid:
                assert again.recovery.jobs == model.jobs
                assert again.recovery.clean, (cut, again.recovery.problems)
            else:
                kinds = {p.kind for p in again.recovery.problems}
                assert kinds <= {"torn-tail", "tail-saved"}, (cut, kinds)


class NoRoomForZeros(FaultyOps):
    """The disk has room for records but not for another step of preallocated zeros."""

    full = False

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.full and data and not data.strip(b"\0"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().pwrite(fd, data, offset)


def test_disk_full_while_preallocating_refuses_puts_not_deletes(tmp_path: Path) -> None:
    rng = random.Random(5)
    ops = NoRoomForZeros(str(tmp_path))
    model = Model()
    opts = BinlogOptions(fsync_ms=0, segment_size=1 << 20, preallocate=4096)
    with Binlog(str(tmp_path), opts, ops=ops, lookup=model.lookup) as log:
        ops.full = True
        with pytest.raises(BinlogWriteError) as failed:
            for jid in range(1, 50):  # until the preallocated room runs out
                rec = make_job(jid, rng)._replace(body=rng.randbytes(200))
                log.put(rec)
                model.jobs[jid] = rec
        assert failed.value.disk_full
        refused = jid
        assert refused > 11 and refused not in model.jobs
        for jid in range(1, 11):  # written anyway, past the preallocated room
            log.delete(jid)
            del model.jobs[jid]
        log.sync()
        ops.full = False  # space is back: the next zeros go after those deletes
        rec = make_job(refused + 1, rng)
        log.put(rec)
        model.jobs[rec.id] = rec
        log.sync()
    with Binlog(str(tmp_path), opts) as again:
        assert again.recovery.jobs == model.jobs
        assert again.recovery.clean, again.recovery.problems
