"""Segment files: naming, listing, creation, and the accounting of live jobs in them.

A segment is ``DIR/binlog.N``; N only increases. The writer appends to the newest one and
starts the next when it would exceed the size limit. Old segments are removed strictly
oldest first and only when no live job is "homed" in them (its latest PUT record lives
there): removing a prefix of the log can never resurrect a job, because a job's PUT always
precedes its updates and its DELETE, so what remains holds either both or an orphan update
or delete that replay ignores. Removing a segment from the middle could drop a DELETE
whose PUT survives, so it is never done.

Preallocation (``BinlogOptions.preallocate``): the segment being written is kept filled
with zeros ahead of its valid data, as beanstalkd does, so that a record overwrites
already written blocks and an fdatasync has no file size to commit (a large share of
each fsync's cost on ext4; figures in benchmarks/README.md). Zeros after the last record
are a clean end of the segment for recovery, never damage: no frame starts with a zero
byte.
"""

from __future__ import annotations

import contextlib
import os
import re

from cmdstalk_py.server.binlog.errors import BinlogWriteError, describe_oserror
from cmdstalk_py.server.binlog.fsops import FileOps
from cmdstalk_py.server.binlog.header import pack_segment_header

SEGMENT_PREFIX = "binlog."
_SEGMENT_RE = re.compile(r"^binlog\.([0-9]{1,9})$")

# A job's home is packed as (segment number << 32) | size of its PUT frame: one int per
# job instead of a tuple keeps the index of a million jobs small.
_HOME_SHIFT = 32
_SIZE_MASK = (1 << _HOME_SHIFT) - 1


def segment_name(number: int) -> str:
    """File name of segment ``number``."""
    return f"{SEGMENT_PREFIX}{number}"


def list_segments(names: list[str]) -> list[int]:
    """Segment numbers among directory entry ``names``, ascending."""
    found = []
    for name in names:
        m = _SEGMENT_RE.match(name)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


class SegmentMeta:
    """Accounting for one segment, kept in memory while the binlog is open.

    ``size`` is the number of valid bytes (header included), ``alloc`` the file's length
    (``size`` plus preallocated zeros), ``live`` the number of live jobs homed here,
    ``ids`` every job id whose PUT was written here (compaction walks it from ``cursor``
    and skips ids that died or moved), ``fd`` is open only for the segment being written.
    """

    __slots__ = ("alloc", "cursor", "fd", "ids", "live", "number", "path", "size")

    def __init__(self, number: int, path: str, size: int) -> None:
        self.number = number
        self.path = path
        self.size = size
        self.alloc = size
        self.live = 0
        self.ids: list[int] = []
        self.cursor = 0
        self.fd: int | None = None

    def __repr__(self) -> str:
        return f"SegmentMeta({self.path!r}, size={self.size}, live={self.live})"


class LiveIndex:
    """Which segment holds each live job's latest PUT ("home"), and the totals that follow.

    The only place that counts: replay and the writer both call :meth:`place` for a PUT and
    :meth:`drop` for a DELETE. ``segments`` maps number -> meta, oldest first;
    ``live_bytes`` is the size of every live job's latest PUT frame.
    """

    __slots__ = ("home", "live_bytes", "segments")

    def __init__(self) -> None:
        self.segments: dict[int, SegmentMeta] = {}
        self.home: dict[int, int] = {}
        self.live_bytes = 0

    def place(self, job_id: int, seg: SegmentMeta, size: int) -> None:
        """A PUT frame of ``size`` bytes for ``job_id`` was appended to ``seg``."""
        old = self.home.get(job_id)
        if old is not None:  # a copy (compaction, re-log) replacing the job
            self.segments[old >> _HOME_SHIFT].live -= 1
            self.live_bytes -= old & _SIZE_MASK
        self.home[job_id] = (seg.number << _HOME_SHIFT) | size
        seg.live += 1
        seg.ids.append(job_id)
        self.live_bytes += size

    def drop(self, job_id: int) -> bool:
        """``job_id`` was deleted; False if it was not live (an orphan delete)."""
        old = self.home.pop(job_id, None)
        if old is None:
            return False
        self.segments[old >> _HOME_SHIFT].live -= 1
        self.live_bytes -= old & _SIZE_MASK
        return True

    def segment_of(self, job_id: int) -> int:
        """Number of the segment holding the job's latest PUT (0 if it is not live)."""
        home = self.home.get(job_id)
        return 0 if home is None else home >> _HOME_SHIFT

    def __len__(self) -> int:
        return len(self.home)


def create_segment(
    ops: FileOps,
    directory: str,
    number: int,
    base_seq: int,
    next_id: int,
    durable: bool,
    flags: int = 0,
    preallocate: int = 0,
) -> SegmentMeta:
    """Create segment ``number`` with its header, durable (file and directory) if asked.

    ``preallocate``: fill the file with zeros up to this length after the header.

    On failure nothing is left behind (best effort) and BinlogWriteError is raised; a
    half-created file that survives a crash is removed by the next recovery.
    """
    path = os.path.join(directory, segment_name(number))
    header = pack_segment_header(number, base_seq, next_id, flags)
    try:
        fd = ops.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise BinlogWriteError(describe_oserror("cannot create", path, exc), exc.errno) from exc
    try:
        written = 0
        while written < len(header):
            n = ops.pwrite(fd, header[written:], written)
            if n <= 0:
                raise OSError(28, os.strerror(28))
            written += n
        alloc = write_zeros(ops, fd, len(header), preallocate)
        if durable:
            ops.fdatasync(fd)
            ops.fsync_dir(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            ops.close(fd)
        with contextlib.suppress(OSError):
            ops.unlink(path)
        raise BinlogWriteError(describe_oserror("cannot create", path, exc), exc.errno) from exc
    meta = SegmentMeta(number, path, len(header))
    meta.alloc = alloc
    meta.fd = fd
    return meta


_ZEROS = bytes(1 << 16)


def write_zeros(ops: FileOps, fd: int, start: int, end: int) -> int:
    """Write zeros from ``start`` up to ``end``; returns the file length reached.

    Raises OSError (e.g. ENOSPC); the zeros written so far stay (they are harmless).
    """
    pos = start
    while pos < end:
        n = ops.pwrite(fd, _ZEROS[: min(len(_ZEROS), end - pos)], pos)
        if n <= 0:
            raise OSError(28, os.strerror(28))
        pos += n
    return max(pos, start)
