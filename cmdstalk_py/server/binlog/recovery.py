"""Recovery: rebuild the live jobs from the segments on disk.

Rules (see ``header`` and ``codec`` for the format):

* Segments are replayed in ascending number, records in file order. Each record's sequence
  number must exceed the last applied one: a record at or below it is stale (a duplicate
  of something already applied) and is skipped, so no mutation is ever applied twice.
  Records are absolute (a PUT replaces the whole job, an UPDATE sets values), so even the
  copies compaction leaves next to their originals replay to the same state.
* The newest segment is where a crash tears writes: from its first damaged frame on,
  everything is cut off (truncated, fsynced, logged with file, offset and bytes dropped;
  the dropped bytes are first saved to ``binlog.N.torn-OFFSET`` for forensics). Nothing
  after a tear is applied, even frames that look intact.
* A damaged stretch in an older segment is media damage, not a tear: it is reported with
  file and offset, skipped up to the next intact frame (found by its magic and CRC), and
  replay goes on; the sequence-number gap says how many records were lost.
* Zeros from some offset to the end of a segment are preallocated room, the segment's
  clean end (no frame starts with a zero byte): not a problem; the zeros are trimmed.
* A newest segment with no complete header (a crash while creating it) is removed. A file
  that is not ours, or is from a newer format version, stops recovery with
  BinlogFormatError rather than being "repaired".
* The next job id is one more than the highest id seen, and never below the floor stored
  in any segment header, so ids do not repeat even after compaction removed every record
  of the highest id.

The replay loop itself is in ``replay``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from cmdstalk_py.server.binlog.codec import FRAME_SIZE, find_next_frame, read_frame
from cmdstalk_py.server.binlog.errors import BinlogFormatError, Problem
from cmdstalk_py.server.binlog.fsops import FileOps
from cmdstalk_py.server.binlog.header import (
    FLAG_AFTER_ABANDONED,
    FORMAT_VERSION,
    HEADER_SIZE,
    HeaderStatus,
    read_segment_header,
)
from cmdstalk_py.server.binlog.record import JobRecord
from cmdstalk_py.server.binlog.replay import Replayer
from cmdstalk_py.server.binlog.segment import LiveIndex, SegmentMeta, list_segments, segment_name


@dataclass
class RecoveryResult:
    """What recovery found: the live jobs, the next job id, and every problem met."""

    jobs: dict[int, JobRecord]
    next_id: int
    problems: list[Problem] = field(default_factory=list)
    segments: int = 0
    records: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    orphans: int = 0  # updates/deletes of jobs not (or no longer) in the log: normal

    @property
    def clean(self) -> bool:
        """True when nothing was damaged, dropped or missing."""
        return not self.problems


class Recovered(NamedTuple):
    """Recovery output handed to the writer: the result plus the index it continues."""

    result: RecoveryResult
    live: LiveIndex
    next_seq: int


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, then given back as it was.

    Recovery (and rebuilding its jobs in a server) makes nothing but long-lived objects
    without cycles: a collection meanwhile finds no garbage and walks every object made so
    far, again and again (figures: benchmarks/README.md).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def recover(ops: FileOps, directory: str, save_torn_tails: bool = True) -> Recovered:
    """Replay every segment of ``directory``; repair a torn newest segment.

    Raises BinlogFormatError for a file that is not a binlog of a readable version.
    """
    with collector_paused():
        return _recover(ops, directory, save_torn_tails)


def _recover(ops: FileOps, directory: str, save_torn_tails: bool) -> Recovered:
    started = time.monotonic()
    rp = Replayer()
    numbers = list_segments(ops.listdir(directory))
    cache: dict[int, bytes] = {}
    # A newest segment without a complete header is a crash during its creation: remove
    # it (and look again, in case an earlier creation also died half-way).
    while numbers:
        number = numbers[-1]
        path = os.path.join(directory, segment_name(number))
        data = ops.read(path)
        status = read_segment_header(data)
        if status.fault == "short" or (status.fault == "zero" and not data.strip(b"\0")):
            rp.problem("removed", path, 0, len(data), "segment without a complete header")
            ops.unlink(path)
            ops.fsync_dir(directory)
            numbers.pop()
            continue
        cache[number] = data
        break
    bytes_read = 0
    previous: int | None = None
    for number in numbers:
        path = os.path.join(directory, segment_name(number))
        data = cache.pop(number) if number in cache else ops.read(path)
        bytes_read += len(data)
        newest = number == numbers[-1]
        _replay_file(ops, rp, path, number, data, newest, previous, save_torn_tails)
        previous = number
    result = RecoveryResult(
        jobs=rp.jobs,
        next_id=max(rp.max_id + 1, rp.id_floor),
        problems=rp.problems,
        segments=len(numbers),
        records=rp.records,
        bytes_read=bytes_read,
        seconds=time.monotonic() - started,
        orphans=rp.orphans,
    )
    return Recovered(result, rp.index, rp.last_seq + 1)


def _replay_file(
    ops: FileOps,
    rp: Replayer,
    path: str,
    number: int,
    data: bytes,
    newest: bool,
    previous: int | None,
    save_torn_tails: bool,
) -> None:
    status = read_segment_header(data)
    if status.fault in ("foreign", "newer"):
        found = "a newer format version" if status.fault == "newer" else "not a cmdstalk binlog"
        raise BinlogFormatError(
            f"{path}: {found} (this code reads version {FORMAT_VERSION}); refusing to touch "
            "the directory - move the file away or use another binlog directory"
        )
    meta = SegmentMeta(number, path, len(data))
    meta.alloc = len(data)
    rp.index.segments[number] = meta
    _check_header(rp, path, status, number, previous)
    _replay_records(ops, rp, meta, path, data, newest and status.header is not None,
                    save_torn_tails)  # fmt: skip


def _check_header(
    rp: Replayer, path: str, status: HeaderStatus, number: int, previous: int | None
) -> None:
    """Report a damaged header and sequence gaps before this segment; move the id floor."""
    # Numbers may be skipped harmlessly: segments holding no record at all are removed
    # from anywhere. Only when sequence numbers are missing too was something lost.
    missing = ""
    if previous is not None and number != previous + 1:
        missing = f"segment files {previous + 1}..{number - 1} are missing"
    header = status.header
    if status.fault == "magic":
        rp.problem("bad-header", path, 0, 4, "file magic damaged, rest of the header intact")
    if header is None:
        detail = f"segment header unreadable ({status.fault})"
        rp.problem("bad-header", path, 0, HEADER_SIZE, detail)
        if missing:
            rp.problem("missing", path, 0, 0, missing)
    else:
        rp.id_floor = max(rp.id_floor, header.next_id)
        if previous is not None and header.base_seq > rp.last_seq + 1:
            if header.flags & FLAG_AFTER_ABANDONED:
                first, last = rp.last_seq + 1, header.base_seq - 1
                rp.problem(
                    "abandoned", path, 0, 0,
                    f"segment {previous} was abandoned after an I/O error; "
                    f"{last - first + 1} record(s) (sequence {first}..{last}) it lacks were "
                    "failed writes or are re-logged here",
                )  # fmt: skip
                rp.last_seq = last
            else:
                if missing:
                    rp.problem("missing", path, 0, 0, missing)
                _gap(rp, path, HEADER_SIZE, header.base_seq)
        elif previous is None:
            # The first segment: what came before it was compacted away, not lost.
            rp.last_seq = max(rp.last_seq, header.base_seq - 1)


def _replay_records(
    ops: FileOps,
    rp: Replayer,
    meta: SegmentMeta,
    path: str,
    data: bytes,
    tear_allowed: bool,
    save_torn_tails: bool,
) -> None:
    """Replay a segment's records; skip damage, cut a torn tail of the newest segment."""
    end = len(data)
    off = min(HEADER_SIZE, end)
    stale = 0
    while off < end:
        off, reason = rp.run(meta, data, off, end)
        if not reason:
            break
        if reason == "seq":
            head = read_frame(memoryview(data), off, end)
            assert not isinstance(head, str)  # replay stopped at an intact frame
            length, seq, _rtype = head
            if seq <= rp.last_seq:
                # Already applied: skipping it is what keeps replay from applying twice.
                stale += 1
                off += FRAME_SIZE + length
                continue
            _gap(rp, path, off, seq)
            continue
        if data.count(b"\x00", off) == end - off:
            # Preallocated zeros after the last record: the segment's clean end.
            meta.size = off
            _trim(ops, path, off)
            break
        if tear_allowed:
            _cut_tail(ops, rp, path, data, off, reason, save_torn_tails)
            meta.size = off
            break
        resume = find_next_frame(memoryview(data), data, off + 1, end)
        rp.problem(
            "corrupt", path, off, resume - off,
            f"{reason}; {resume - off} bytes skipped"
            + ("" if resume < end else " to the end of the file"),
        )  # fmt: skip
        off = resume
    if stale:
        rp.problem("stale", path, 0, 0, f"{stale} already-applied records ignored")


def _trim(ops: FileOps, path: str, size: int) -> None:
    # Best effort: a segment left with its zeros is read the same way next time.
    with contextlib.suppress(OSError):
        fd = ops.open(path, os.O_RDWR)
        try:
            ops.truncate(fd, size)
        finally:
            ops.close(fd)


def _gap(rp: Replayer, path: str, offset: int, seq: int) -> None:
    first, last = rp.last_seq + 1, seq - 1
    rp.problem(
        "seq-gap", path, offset, 0,
        f"{last - first + 1} records (sequence {first}..{last}) are missing before this point",
    )  # fmt: skip
    rp.last_seq = seq - 1


def _cut_tail(
    ops: FileOps, rp: Replayer, path: str, data: bytes, off: int, reason: str, save: bool
) -> None:
    dropped = len(data) - off
    if save and data[off:].strip(b"\0"):
        side = f"{path}.torn-{off}"
        # Forensics only: failing to keep the bytes must not stop the server.
        with contextlib.suppress(OSError):
            fd = ops.open(side, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                ops.pwrite(fd, data[off:], 0)
            finally:
                ops.close(fd)
            rp.problem("tail-saved", side, 0, dropped, f"dropped bytes of {path} kept here")
    rp.problem("torn-tail", path, off, dropped, f"{reason}; truncated, {dropped} bytes dropped")
    fd = ops.open(path, os.O_RDWR)
    try:
        ops.truncate(fd, off)
        # Durable before anything new is written: a tail that came back after a later
        # crash would carry sequence numbers the new records reuse.
        ops.fdatasync(fd)
    finally:
        ops.close(fd)
