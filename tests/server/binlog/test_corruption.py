"""Damaged logs: torn and flipped newest segments, damage in older segments, bad headers.

The newest segment is cut at its first damaged frame and exactly the records before it
come back; damage in an older segment is reported with file and offset and only the
damaged records are lost.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import (
    Binlog,
    BinlogFormatError,
    BinlogOptions,
    JobRecord,
    StoredState,
)
from cmdstalk_py.server.binlog.codec import read_frame
from cmdstalk_py.server.binlog.header import HEADER_SIZE
from tests.server.binlog.faults import FaultyOps
from tests.server.binlog.model import T0, Model

NEVER = BinlogOptions(fsync_ms=None)


def frame_bounds(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each intact frame of a pristine segment."""
    mv = memoryview(data)
    bounds, off = [], HEADER_SIZE
    while off < len(data):
        found = read_frame(mv, off, len(data))
        assert not isinstance(found, str), f"pristine segment has damage at {off}: {found}"
        end = off + 21 + found[0]
        bounds.append((off, end))
        off = end
    return bounds


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Model]:
    """One segment holding ~120 random records, and the model of every prefix."""
    path = tmp_path_factory.mktemp("pristine")
    rng = random.Random(42)
    model = Model()
    with Binlog(str(path), NEVER) as log:
        for _ in range(120):
            model.step(log, rng, put_weight=0.55)
    data = (path / "binlog.1").read_bytes()
    assert len(frame_bounds(data)) == 120
    return data, model


def recover_from(directory: Path, content: bytes) -> Binlog:
    """Recover a directory holding only ``content`` as binlog.1 (the directory is reused)."""
    directory.mkdir(exist_ok=True)
    for name in os.listdir(directory):
        os.unlink(directory / name)
    (directory / "binlog.1").write_bytes(content)
    # Hundreds of recoveries: FaultyOps skips the real fsyncs (their effect is modelled).
    return Binlog(str(directory), NEVER, ops=FaultyOps(str(directory)))


def records_before(bounds: list[tuple[int, int]], offset: int) -> int:
    """How many whole records end at or before ``offset``."""
    return sum(1 for _start, end in bounds if end <= offset)


def test_every_truncation_point_recovers_the_valid_prefix(
    tmp_path: Path, pristine: tuple[bytes, Model]
) -> None:
    data, model = pristine
    bounds = frame_bounds(data)
    rng = random.Random(7)
    # Every frame boundary and its neighbours, plus random points in between.
    points = {0, 1, HEADER_SIZE - 1, HEADER_SIZE, len(data)}
    for start, end in bounds[:: max(1, len(bounds) // 25)]:
        points.update({start + 1, start + 20, start + 21, end - 1})
    points.update(rng.randrange(len(data) + 1) for _ in range(200))
    assert len(points) > 250
    directory = tmp_path / "d"
    for cut in sorted(points):
        with recover_from(directory, data[:cut]) as log:
            k = records_before(bounds, cut) if cut >= HEADER_SIZE else 0
            assert log.recovery.jobs == model.history[k], f"cut at {cut}"
            if cut >= HEADER_SIZE:
                assert log.recovery.next_id == model.next_history[k]
            torn = [p for p in log.recovery.problems if p.kind == "torn-tail"]
            whole = {end for _s, end in bounds} | {HEADER_SIZE}
            partial = cut >= HEADER_SIZE and cut not in whole
            assert bool(torn) == partial, (cut, log.recovery.problems)
            if torn:
                assert torn[0].file == str(directory / "binlog.1")
                assert torn[0].offset == ([s for s, _e in bounds if s < cut][-1])
                assert torn[0].size == cut - torn[0].offset
        # The cut stays cut.
        with Binlog(str(directory), NEVER, ops=FaultyOps(str(directory))) as log:
            assert log.recovery.jobs == model.history[k]
            assert [p.kind for p in log.recovery.problems] == []


def test_random_bit_flips_in_the_newest_segment(
    tmp_path: Path, pristine: tuple[bytes, Model]
) -> None:
    data, model = pristine
    bounds = frame_bounds(data)
    rng = random.Random(11)
    for _i in range(200):
        pos = rng.randrange(len(data))
        damaged = bytearray(data)
        damaged[pos] ^= 1 << rng.randrange(8)
        with recover_from(tmp_path / "d", bytes(damaged)) as log:
            if pos < HEADER_SIZE:
                # A damaged header: every frame is still intact and found.
                expected = len(bounds)
                assert any(p.kind == "bad-header" for p in log.recovery.problems)
            else:
                expected = next(k for k, (s, e) in enumerate(bounds) if s <= pos < e)
                torn = [p for p in log.recovery.problems if p.kind == "torn-tail"]
                assert [p.offset for p in torn] == [bounds[expected][0]]
            assert log.recovery.jobs == model.history[expected], f"flip at {pos}"


def test_random_garbage_tails(tmp_path: Path, pristine: tuple[bytes, Model]) -> None:
    """Torn writes that leave garbage or zeros (pre-zeroed blocks) after the cut."""
    data, model = pristine
    bounds = frame_bounds(data)
    rng = random.Random(5)
    for _i in range(100):
        cut = rng.randrange(HEADER_SIZE, len(data))
        filler = rng.choice([b"\0", None])
        n = rng.randint(1, 4096)
        tail = filler * n if filler else rng.randbytes(n)
        with recover_from(tmp_path / "d", data[:cut] + tail) as log:
            assert log.recovery.jobs == model.history[records_before(bounds, cut)]


def test_torn_tail_is_saved_for_forensics(tmp_path: Path, pristine: tuple[bytes, Model]) -> None:
    data, _model = pristine
    cut = frame_bounds(data)[50][0] + 10
    with recover_from(tmp_path / "d", data[:cut] + b"junk") as log:
        saved = [p for p in log.recovery.problems if p.kind == "tail-saved"]
        assert saved and Path(saved[0].file).read_bytes() == data[cut - 10 : cut] + b"junk"


def _three_segments(path: Path) -> tuple[Model, list[bytes]]:
    """Puts of jobs 1..60 spread over three segments, some updated later."""
    rng = random.Random(3)
    model = Model()
    with Binlog(str(path), BinlogOptions(fsync_ms=None, segment_size=4096)) as log:
        for jid in range(1, 61):
            rec = JobRecord(jid, b"t", rng.randbytes(150), jid, 60, 0, StoredState.READY, T0, 0.0)
            log.put(rec)
            model.jobs[jid] = rec
            if jid % 7 == 0:
                upd = model.jobs[jid - 5]._replace(state=StoredState.BURIED, buries=1)
                log.update(upd)
                model.jobs[jid - 5] = upd
    files = sorted(os.listdir(path))
    assert {"binlog.1", "binlog.2", "binlog.3"} <= set(files)
    return model, [(path / f"binlog.{n}").read_bytes() for n in (1, 2, 3)]


def test_damaged_record_in_an_older_segment_is_skipped_and_reported(tmp_path: Path) -> None:
    model, segments = _three_segments(tmp_path)
    seg1 = segments[0]
    bounds = frame_bounds(seg1)
    start, end = bounds[4]  # job 5's put (no update touches job 5)
    damaged = bytearray(seg1)
    damaged[start + 40] ^= 0xFF
    (tmp_path / "binlog.1").write_bytes(bytes(damaged))
    with Binlog(str(tmp_path), NEVER) as log:
        expected = dict(model.jobs)
        del expected[5]
        assert log.recovery.jobs == expected
        kinds = {p.kind: p for p in log.recovery.problems}
        assert kinds["corrupt"].file == str(tmp_path / "binlog.1")
        assert kinds["corrupt"].offset == start
        assert kinds["corrupt"].size == end - start
        assert "1 records" in kinds["seq-gap"].detail
        assert "torn-tail" not in kinds
    assert (tmp_path / "binlog.1").read_bytes() == bytes(damaged), "older segments are not cut"


def test_damaged_length_field_resyncs_on_the_next_frame(tmp_path: Path) -> None:
    model, segments = _three_segments(tmp_path)
    seg1 = segments[0]
    bounds = frame_bounds(seg1)
    start, _end = bounds[2]  # job 3's put
    damaged = bytearray(seg1)
    struct.pack_into("<I", damaged, start + 8, 0x7FFF_0000)  # absurd length
    (tmp_path / "binlog.1").write_bytes(bytes(damaged))
    with Binlog(str(tmp_path), NEVER) as log:
        expected = dict(model.jobs)
        del expected[3]
        assert log.recovery.jobs == expected


def test_garbage_at_the_end_of_an_older_segment(tmp_path: Path) -> None:
    model, segments = _three_segments(tmp_path)
    seg1 = segments[0]
    bounds = frame_bounds(seg1)
    start, _end = bounds[-1]
    (tmp_path / "binlog.1").write_bytes(seg1[: start + 5])
    with Binlog(str(tmp_path), NEVER) as log:
        lost = {
            jid for jid in model.jobs if jid not in log.recovery.jobs
        }  # exactly the last record of segment 1
        assert len(lost) == 1
        kinds = [p.kind for p in log.recovery.problems]
        assert "corrupt" in kinds and "seq-gap" in kinds


def test_missing_middle_segment_is_reported(tmp_path: Path) -> None:
    _model, _segments = _three_segments(tmp_path)
    (tmp_path / "binlog.2").unlink()
    with Binlog(str(tmp_path), NEVER) as log:
        kinds = [p.kind for p in log.recovery.problems]
        assert "missing" in kinds and "seq-gap" in kinds


def test_half_created_newest_segment_is_removed(tmp_path: Path) -> None:
    model, _segments = _three_segments(tmp_path)
    before = len([n for n in os.listdir(tmp_path) if n.startswith("binlog.")])
    (tmp_path / "binlog.9").write_bytes(b"CSB")
    (tmp_path / "binlog.8").write_bytes(b"")
    with Binlog(str(tmp_path), NEVER) as log:
        assert log.recovery.jobs == model.jobs
        assert [p.kind for p in log.recovery.problems] == ["removed", "removed"]
        assert log.stats().current_index == before + 1


@pytest.mark.parametrize(
    "content",
    [
        struct.pack("<i", 7) + b"\0" * 100,  # a beanstalkd 1.12 binlog
        b"#!/bin/sh\necho something else entirely\n",
    ],
)
def test_foreign_files_are_refused_untouched(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "binlog.1").write_bytes(content)
    with pytest.raises(BinlogFormatError, match=r"binlog\.1"):
        Binlog(str(tmp_path), NEVER)
    assert (tmp_path / "binlog.1").read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["binlog.1", "lock"]


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    from cmdstalk_py.server.binlog import header

    with Binlog(str(tmp_path), NEVER):
        pass
    head = header.SEGMENT_HEADER.pack(header.FILE_MAGIC, header.FORMAT_VERSION + 1, 0, 1, 1, 1)
    import zlib

    newer = head + header.HEADER_CRC.pack(zlib.crc32(head))
    (tmp_path / "binlog.1").write_bytes(newer)
    with pytest.raises(BinlogFormatError, match="newer format version"):
        Binlog(str(tmp_path), NEVER)
