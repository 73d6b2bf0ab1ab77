"""Appending records to the current segment, rotating segments, and the live-job index.

``SegmentWriter`` knows nothing about fsync policy or compaction (that is ``Binlog``): it
writes one frame per call with one ``pwrite`` at the end of the valid data, keeps each
segment's size and live-job count and each live job's home segment, and starts the next
segment when the current one is full.

A write that fails may still have put some or all of its bytes on disk. It is cut back
with ``ftruncate`` (and the cut fsynced, or a later fsync could make the junk durable
while the cut is not), at once or before the next write; until that works every write
fails. Sequence numbers are consumed only by successful writes, so they stay consecutive
in a segment. A segment whose tail cannot be cut back or whose fsync failed is abandoned
(see ``Binlog.sync``): the next segment skips one sequence number, so a complete record
left behind by a "failed" write can never be mistaken for the record that reused its
number, and the failed write's job is re-logged from its current state.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os

from cmdstalk_py.server.binlog.codec import encode_delete, encode_put, encode_update
from cmdstalk_py.server.binlog.errors import BinlogWriteError, describe_oserror
from cmdstalk_py.server.binlog.fsops import FileOps
from cmdstalk_py.server.binlog.header import FLAG_AFTER_ABANDONED, HEADER_SIZE
from cmdstalk_py.server.binlog.record import JobRecord
from cmdstalk_py.server.binlog.segment import LiveIndex, SegmentMeta, create_segment, write_zeros

log = logging.getLogger("cmdstalk_py.server.binlog")


class SegmentWriter:
    """The append side of the log (see module docstring).

    Public attributes are shared with ``Binlog``: ``index`` (the segments and the live
    jobs homed in them, continued from recovery), ``dirty`` (written since the last good
    fsync), ``touched`` (ids written since then), ``relog_pending`` and ``untrusted`` (a
    segment whose fsync failed).
    """

    def __init__(
        self,
        ops: FileOps,
        directory: str,
        segment_size: int,
        durable: bool,
        index: LiveIndex,
        next_seq: int,
        next_id: int,
        preallocate: int = 0,
    ) -> None:
        self.ops = ops
        # Zeros kept ahead of the valid data (see segment.py), in steps of this many bytes.
        self.preallocate = preallocate
        self.directory = directory
        self.segment_size = segment_size
        self.durable = durable
        self.index = index
        self.seq = next_seq
        self.next_id = next_id
        self.dirty = False
        self.touched: set[int] = set()
        self.relog_pending = False
        self.untrusted: int | None = None
        self.written = 0
        self.migrated = 0
        self.tail_dirty = False  # bytes of a failed write may follow the valid data
        self._removal_unsynced = False  # a segment was unlinked, the directory not fsynced
        self._sealed: tuple[int, bool] | None = None  # see _sealed_summary
        number = max(index.segments, default=0) + 1
        self.active = create_segment(
            ops, directory, number, next_seq, next_id, durable, 0, self._first_alloc()
        )
        index.segments[number] = self.active

    # --------------------------------------------------------------- records

    def put(self, rec: JobRecord, copy: bool = False) -> None:
        """Write a PUT; ``copy`` for compaction and re-logging (never refused for size)."""
        data = encode_put(self.seq, rec)
        seg = self._write(data, copy, rec.id)
        self.touched.add(rec.id)
        self.index.place(rec.id, seg, len(data))
        if rec.id >= self.next_id:
            self.next_id = rec.id + 1

    def update(self, rec: JobRecord) -> None:
        """Write an UPDATE."""
        self._write(encode_update(self.seq, rec), True, rec.id)
        self.touched.add(rec.id)

    def delete(self, job_id: int) -> None:
        """Write a DELETE."""
        self._write(encode_delete(self.seq, job_id), True, job_id)
        self.touched.add(job_id)
        self.index.drop(job_id)

    def _write(self, data: bytes, may_overflow: bool, job_id: int) -> SegmentMeta:
        """Append one frame (built with the current sequence number) about ``job_id``."""
        if self.tail_dirty:
            self.repair_tail()
        seg = self.active
        if seg.size + len(data) > self.segment_size and seg.size > HEADER_SIZE:
            try:
                self.rotate()
            except BinlogWriteError:
                # Deletes and updates go past the size limit rather than fail: a full disk
                # must not stop clients from draining the queue.
                if not may_overflow:
                    raise
            seg = self.active
        if seg.size + len(data) > seg.alloc and self.preallocate:
            try:
                self.extend(len(data))
            except BinlogWriteError:
                # As above: a put is refused, a delete or update is written anyway (its
                # few bytes may still fit where a whole step of zeros did not).
                if not may_overflow:
                    raise
        fd = seg.fd
        assert fd is not None
        written = 0
        try:
            while written < len(data):
                n = self.ops.pwrite(fd, data[written:], seg.size + written)
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += n
        except OSError as exc:
            # A failed pwrite may still have written part or all of the frame: cut it off
            # now, or (if that fails too) before the next write. Until the cut is durable
            # the job counts as touched, so abandoning this segment re-logs it.
            self.touched.add(job_id)
            self.tail_dirty = True
            with contextlib.suppress(BinlogWriteError):
                self.repair_tail()
            raise BinlogWriteError(
                describe_oserror("cannot write to", seg.path, exc), exc.errno
            ) from exc
        seg.size += len(data)
        if seg.size > seg.alloc:
            seg.alloc = seg.size
        self.seq += 1
        self.dirty = True
        self.written += 1
        return seg

    def _first_alloc(self) -> int:
        return min(self.preallocate, self.segment_size) if self.preallocate else 0

    def extend(self, need: int = 0) -> None:
        """Preallocate zeros for at least ``need`` more bytes, a whole step at a time.

        Raises BinlogWriteError (disk full: the record that needed the room is refused).
        """
        seg = self.active
        assert seg.fd is not None
        # Never from below the valid end: zeros must not overwrite a record (one written
        # past the room after a failed extension, say).
        start = max(seg.alloc, seg.size)
        target = max(seg.size + need, min(start + self.preallocate, self.segment_size))
        if target <= start:
            return
        try:
            seg.alloc = write_zeros(self.ops, seg.fd, start, target)
        except OSError as exc:
            raise BinlogWriteError(
                describe_oserror("cannot preallocate", seg.path, exc), exc.errno
            ) from exc

    def wants_extension(self) -> bool:
        """Less than half a step of preallocated zeros is left in the current segment."""
        seg = self.active
        return bool(
            self.preallocate
            and seg.fd is not None
            and not self.tail_dirty
            and seg.alloc - seg.size < self.preallocate // 2
            and seg.alloc < self.segment_size
        )

    def extend_ahead(self) -> None:
        """Between commands: keep half a step of zeros ready, so writes rarely extend."""
        if self.wants_extension():
            self.extend()

    def _trim(self, seg: SegmentMeta) -> None:
        # Drop the preallocated zeros after the last record (best effort: recovery reads
        # zeros as a clean end anyway).
        if seg.alloc > seg.size and seg.fd is not None:
            with contextlib.suppress(OSError):
                self.ops.truncate(seg.fd, seg.size)
                seg.alloc = seg.size

    def repair_tail(self) -> None:
        """Cut the bytes of a failed write off the current segment, durably.

        Raises BinlogWriteError (the tail stays dirty) if that fails.
        """
        seg = self.active
        assert seg.fd is not None
        try:
            self.ops.truncate(seg.fd, seg.size)
        except OSError as exc:
            raise BinlogWriteError(
                describe_oserror("cannot cut back a failed write in", seg.path, exc), exc.errno
            ) from exc
        seg.alloc = seg.size
        if self.durable:
            try:
                self.ops.fdatasync(seg.fd)
            except OSError as exc:
                # A failed fsync taints the whole segment (see Binlog.sync).
                self.relog_pending = True
                self.untrusted = seg.number
                raise BinlogWriteError(
                    describe_oserror("fsync failed for", seg.path, exc), exc.errno
                ) from exc
        self.tail_dirty = False

    # -------------------------------------------------------------- segments

    def rotate(self, abandon: bool = False) -> None:
        """Start the next segment; the old one is fsynced and closed.

        ``abandon``: the old segment is not to be trusted (failed fsync or a tail that
        cannot be cut back): it is neither fsynced nor repaired, and one sequence number
        is skipped. Raises BinlogWriteError if the new segment cannot be created (the old
        one stays current). A failed fsync of the old one sets ``relog_pending``.
        """
        old = self.active
        if self.tail_dirty and not abandon:
            self.repair_tail()
        skip = 1 if abandon else 0
        new = create_segment(
            self.ops, self.directory, old.number + 1, self.seq + skip, self.next_id,
            self.durable, FLAG_AFTER_ABANDONED if abandon else 0, self._first_alloc(),
        )  # fmt: skip
        if not abandon:
            self._trim(old)
        self.seq += skip
        self.tail_dirty = False
        if not abandon and self.dirty and self.durable and old.number != self.untrusted:
            try:
                assert old.fd is not None
                self.ops.fdatasync(old.fd)
            except OSError as exc:
                log.error("binlog: %s", describe_oserror("fsync failed for", old.path, exc))
                self.relog_pending = True
                self.untrusted = old.number
        self._close_active()
        self.index.segments[new.number] = new
        self.active = new
        self._sealed = None
        if not self.relog_pending:
            # Everything before the new segment is durable (or durability is off).
            self.dirty = False
            self.touched.clear()

    def fdatasync(self) -> None:
        """fsync the current segment; OSError on failure (the caller decides)."""
        fd = self.active.fd
        assert fd is not None
        self.ops.fdatasync(fd)

    def oldest(self) -> SegmentMeta:
        """The oldest segment still on disk (possibly the current one)."""
        return self.index.segments[next(iter(self.index.segments))]

    def total_bytes(self) -> int:
        """Bytes in every segment (valid data and damage alike)."""
        return self._sealed_summary()[0] + self.active.size

    def has_empty_sealed(self) -> bool:
        """Whether :meth:`empty_sealed` would find any (cheap: asked every loop iteration)."""
        return self._sealed_summary()[1]

    def _sealed_summary(self) -> tuple[int, bool]:
        # Sealed segments never change size, so this is recomputed only after a rotation
        # or a removal.
        summary = self._sealed
        if summary is None:
            active = self.active
            sealed = [seg for seg in self.index.segments.values() if seg is not active]
            summary = self._sealed = (
                sum(seg.size for seg in sealed),
                any(seg.size == HEADER_SIZE for seg in sealed),
            )
        return summary

    def empty_sealed(self) -> list[SegmentMeta]:
        """Segments other than the current one that hold no record at all.

        Every start begins a new segment, so restarts without traffic leave these behind.
        Removing one from anywhere is safe: it holds no DELETE, and its id floor and
        sequence number are carried by every newer segment's header.
        """
        return [
            seg
            for seg in self.index.segments.values()
            if seg.size == HEADER_SIZE and seg is not self.active
        ]

    def remove(self, seg: SegmentMeta) -> None:
        """Unlink ``seg``: the oldest segment without live jobs, or an empty one.

        Each removal is made durable before the next: a file system may persist
        directory changes out of order, and a surviving older segment after a vanished
        newer one could resurrect a job whose DELETE was in the vanished one. Raises
        OSError.
        """
        assert seg is not self.active and seg.live == 0
        assert seg is self.oldest() or seg.size == HEADER_SIZE
        if self._removal_unsynced and self.durable:
            self.ops.fsync_dir(self.directory)
            self._removal_unsynced = False
        with contextlib.suppress(FileNotFoundError):
            self.ops.unlink(seg.path)
        del self.index.segments[seg.number]
        self._sealed = None
        self._removal_unsynced = True
        if self.durable:
            self.ops.fsync_dir(self.directory)
            self._removal_unsynced = False
        log.debug("binlog: removed %s", seg.path)

    def close(self) -> None:
        """Cut any junk (and preallocated zeros) after the last record, close the segment."""
        if self.tail_dirty:
            with contextlib.suppress(BinlogWriteError):
                self.repair_tail()
        else:
            self._trim(self.active)
        self._close_active()

    def _close_active(self) -> None:
        seg = self.active
        if seg.fd is not None:
            fd, seg.fd = seg.fd, None
            with contextlib.suppress(OSError):
                self.ops.close(fd)
