"""The write-ahead binlog: open (lock + recover), append, sync policy, maintenance.

Driven by the server's event loop, no threads:

* ``put`` / ``update`` / ``delete`` write one framed record each with one ``pwrite`` (so
  a write error is known before the command replies) but do not fsync.
* ``tick(now)`` fsyncs when the policy says so and does a bounded amount of maintenance
  (removing unneeded old segments, copying a few live jobs out of the oldest one).
  ``next_deadline()`` says when ``tick`` is next due, for the loop's poll timeout.
* With ``fsync_ms=0`` the loop calls ``tick(now)`` (or ``sync()``) once per iteration,
  after handling every command read in that iteration and before sending their replies:
  one fsync covers the whole batch of pipelined commands (group commit).
  With ``fsync_ms=N`` fsync happens at most every N ms; with ``None`` never.

Write errors: a failed or short write is cut back (``ftruncate`` to the last good offset,
retried before the next write if it fails too), so no partial record is ever followed by
a good one and the log works again once space returns. A failed fsync is worse: after
it the kernel may have dropped the unsynced pages and a retry can report success falsely.
So the segment is abandoned: a new segment is started and every job touched since the
last good sync is re-logged there from its current state (``lookup``), then fsynced.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from cmdstalk_py.server.binlog.compaction import removable, should_compact
from cmdstalk_py.server.binlog.errors import (
    BinlogClosedError,
    BinlogError,
    BinlogSyncError,
    BinlogWriteError,
    describe_oserror,
)
from cmdstalk_py.server.binlog.frame import HEADER_SIZE, frame
from cmdstalk_py.server.binlog.fsops import FileOps, RealFileOps
from cmdstalk_py.server.binlog.lock import DirLock
from cmdstalk_py.server.binlog.record import (
    T_DELETE,
    T_PUT,
    T_UPDATE,
    JobRecord,
    delete_payload,
    put_parts,
    update_payload,
)
from cmdstalk_py.server.binlog.recovery import RecoveryResult, recover
from cmdstalk_py.server.binlog.segment import (
    HOME_SHIFT,
    SIZE_MASK,
    SegmentMeta,
    create_segment,
)

log = logging.getLogger("cmdstalk_py.server.binlog")

Lookup = Callable[[int], JobRecord | None]
"""The current state of a job as the server knows it (None if it no longer exists)."""

DEFAULT_SEGMENT_SIZE = 10 * 1024 * 1024
_MAINTENANCE_BACKOFF = 1.0  # seconds before retrying maintenance that hit an error
_UNLINKS_PER_TICK = 4


@dataclass(frozen=True, slots=True)
class BinlogOptions:
    """How the binlog writes.

    ``fsync_ms``: None never fsyncs (``-F``), 0 fsyncs before every reply (``-f 0``), N
    at most every N milliseconds (``-f N``, default 50). ``segment_size``: ``-s``.
    ``compact_ratio``: compact when the files hold more than this many times the live
    jobs' bytes. ``compact_budget``: jobs copied per ``tick`` at most.
    """

    fsync_ms: int | None = 50
    segment_size: int = DEFAULT_SEGMENT_SIZE
    compact_ratio: float = 2.0
    compact_budget: int = 256
    save_torn_tails: bool = True

    def __post_init__(self) -> None:
        if self.fsync_ms is not None and self.fsync_ms < 0:
            raise ValueError("fsync_ms must be >= 0 or None")
        if self.segment_size < 1024:
            raise ValueError("segment_size must be at least 1024 bytes")
        if self.compact_ratio <= 1.0:
            raise ValueError("compact_ratio must be > 1")
        if self.compact_budget < 1:
            raise ValueError("compact_budget must be >= 1")


@dataclass(frozen=True, slots=True)
class BinlogStats:
    """Counters for ``stats`` (beanstalkd's binlog-* fields) and for monitoring."""

    oldest_index: int
    current_index: int
    records_written: int
    records_migrated: int
    max_size: int
    segments: int
    total_bytes: int
    live_jobs: int
    live_bytes: int
    syncs: int


class Binlog:
    """An open, locked binlog directory. ``Binlog(directory, ...)`` or ``Binlog.open``."""

    def __init__(
        self,
        directory: str,
        options: BinlogOptions | None = None,
        ops: FileOps | None = None,
        lookup: Lookup | None = None,
    ) -> None:
        """Lock ``directory`` (created if missing), recover it, and start a new segment.

        The recovered jobs are in ``.recovery``. ``lookup`` (settable later as
        ``.lookup``) must be bound before the first ``tick`` so compaction and re-logging
        can read jobs' current state. Raises BinlogLockedError, BinlogFormatError, or
        BinlogError for I/O failures during recovery.
        """
        self.directory = os.path.abspath(directory)
        self.options = options or BinlogOptions()
        self.ops: FileOps = ops or RealFileOps()
        self.lookup: Lookup | None = lookup
        try:
            self.ops.makedirs(self.directory)
        except OSError as exc:
            raise BinlogError(describe_oserror("cannot create", self.directory, exc)) from exc
        self._lock = DirLock.acquire(self.ops, self.directory)
        try:
            self._init_from_recovery()
        except OSError as exc:
            self._lock.release()
            raise BinlogError(describe_oserror("recovery failed in", self.directory, exc)) from exc
        except BaseException:
            self._lock.release()
            raise

    @classmethod
    def open(
        cls,
        directory: str,
        options: BinlogOptions | None = None,
        ops: FileOps | None = None,
        lookup: Lookup | None = None,
    ) -> Binlog:
        """Same as ``Binlog(...)``: lock, recover, start a new segment."""
        return cls(directory, options, ops, lookup)

    def _init_from_recovery(self) -> None:
        rec = recover(self.ops, self.directory, self.options.save_torn_tails)
        self.recovery: RecoveryResult = rec.result
        self._segments: dict[int, SegmentMeta] = rec.segments
        self._home: dict[int, int] = rec.home
        self._live_bytes = rec.live_bytes
        self._seq = rec.next_seq
        self._next_id = rec.result.next_id
        self._durable = self.options.fsync_ms is not None
        self._dirty = False  # written since the last good fsync
        self._tail_dirty = False  # bytes past the active segment's size may be junk
        self._relog_pending = False
        self._untrusted: int | None = None  # segment whose fsync failed
        self._touched: set[int] = set()
        self._last_sync = float("-inf")
        self._maintenance_after = float("-inf")
        self._now = float("-inf")
        self._written = 0
        self._migrated = 0
        self._syncs = 0
        self._closed = False
        number = max(self._segments, default=0) + 1
        self._active = create_segment(
            self.ops, self.directory, number, self._seq, self._next_id, self._durable
        )
        self._segments[number] = self._active
        log.info(
            "binlog %s: recovered %d jobs from %d records in %d segments (%.2fs), next id %d",
            self.directory, len(self.recovery.jobs), self.recovery.records,
            self.recovery.segments, self.recovery.seconds, self._next_id,
        )  # fmt: skip

    # ----------------------------------------------------------------- appending

    def put(self, rec: JobRecord) -> None:
        """Log a new job (whole record). Raises BinlogWriteError; then nothing was logged."""
        self._log_put(rec)

    def update(self, rec: JobRecord) -> None:
        """Log a job's new state, priority, delay, deadline and counters."""
        self._write(self._frame(T_UPDATE, update_payload(rec)), may_overflow=True)
        self._touched.add(rec.id)

    def delete(self, job_id: int) -> None:
        """Log a job's deletion."""
        self._write(self._frame(T_DELETE, delete_payload(job_id)), may_overflow=True)
        self._touched.add(job_id)
        old = self._home.pop(job_id, None)
        if old is not None:
            self._segments[old >> HOME_SHIFT].live -= 1
            self._live_bytes -= old & SIZE_MASK

    def _log_put(self, rec: JobRecord, copy: bool = False) -> None:
        data = self._frame(T_PUT, *put_parts(rec))
        # A copy must never be refused for want of a new segment any more than a delete.
        seg = self._write(data, may_overflow=copy)
        jid = rec.id
        self._touched.add(jid)
        old = self._home.get(jid)
        if old is not None:
            self._segments[old >> HOME_SHIFT].live -= 1
            self._live_bytes -= old & SIZE_MASK
        self._home[jid] = (seg.number << HOME_SHIFT) | len(data)
        seg.live += 1
        seg.ids.append(jid)
        self._live_bytes += len(data)
        if jid >= self._next_id:
            self._next_id = jid + 1

    def _frame(self, rtype: int, *parts: bytes) -> bytes:
        return frame(self._seq, rtype, *parts)

    def _write(self, data: bytes, may_overflow: bool) -> SegmentMeta:
        """Append one frame (built with the current sequence number) to the log."""
        if self._closed:
            raise BinlogClosedError(f"binlog {self.directory} is closed")
        if self._tail_dirty:
            self._repair_tail()
        seg = self._active
        if seg.size + len(data) > self.options.segment_size and seg.size > HEADER_SIZE:
            try:
                self._rotate(sync_old=True)
            except BinlogWriteError:
                # Deletes and updates go past the size limit rather than fail: a full disk
                # must not stop clients from draining the queue.
                if not may_overflow:
                    raise
            seg = self._active
        fd = seg.fd
        assert fd is not None
        written = 0
        try:
            while written < len(data):
                n = self.ops.pwrite(fd, data[written:] if written else data, seg.size + written)
                if n <= 0:
                    raise OSError(28, os.strerror(28))
                written += n
        except OSError as exc:
            # A failed pwrite may still have written part of the frame: cut it off now, or
            # (if that fails too) before the next write.
            self._tail_dirty = True
            with contextlib.suppress(BinlogWriteError):
                self._repair_tail()
            raise BinlogWriteError(
                describe_oserror("cannot write to", seg.path, exc), exc.errno
            ) from exc
        seg.size += len(data)
        self._seq += 1
        self._dirty = True
        self._written += 1
        return seg

    def _repair_tail(self) -> None:
        seg = self._active
        assert seg.fd is not None
        try:
            self.ops.truncate(seg.fd, seg.size)
        except OSError as exc:
            raise BinlogWriteError(
                describe_oserror("cannot cut back a failed write in", seg.path, exc), exc.errno
            ) from exc
        self._tail_dirty = False

    def _rotate(self, sync_old: bool) -> None:
        """Start the next segment; the old one is fsynced (if asked) and closed."""
        old = self._active
        new = create_segment(
            self.ops, self.directory, old.number + 1, self._seq, self._next_id, self._durable
        )
        if sync_old and self._dirty and self._durable and old.number != self._untrusted:
            try:
                assert old.fd is not None
                self.ops.fdatasync(old.fd)
            except OSError as exc:
                log.error("binlog: %s", describe_oserror("fsync failed for", old.path, exc))
                self._relog_pending = True
                self._untrusted = old.number
        if self._tail_dirty:
            with contextlib.suppress(BinlogWriteError):
                self._repair_tail()
            self._tail_dirty = False
        if old.fd is not None:
            with contextlib.suppress(OSError):
                self.ops.close(old.fd)
            old.fd = None
        self._segments[new.number] = new
        self._active = new
        if not self._relog_pending:
            # Everything before the new segment is durable (or durability is off).
            self._dirty = False
            self._touched.clear()

    # ------------------------------------------------------------------ syncing

    @property
    def needs_sync(self) -> bool:
        """True when records were appended (or must be re-logged) since the last fsync."""
        return self._dirty or self._relog_pending

    def sync(self) -> None:
        """Make every record appended so far durable; no-op when nothing is pending.

        Raises BinlogSyncError when that cannot be done; the records stay pending and
        the next call tries again in a fresh segment.
        """
        if not (self._dirty or self._relog_pending):
            return
        if self._closed:
            raise BinlogClosedError(f"binlog {self.directory} is closed")
        failure: BaseException | None = None
        for _attempt in range(2):
            try:
                if self._relog_pending:
                    self._relog()
                fd = self._active.fd
                assert fd is not None
                self.ops.fdatasync(fd)
            except OSError as exc:
                failure = exc
                path = self._active.path
                log.error("binlog: %s", describe_oserror("fsync failed for", path, exc))
                self._relog_pending = True
                self._untrusted = self._active.number
                continue
            except BinlogError as exc:
                failure = exc
                break
            self._dirty = False
            self._touched.clear()
            self._syncs += 1
            return
        raise BinlogSyncError(f"binlog {self.directory}: records not durable: {failure}")

    def _relog(self) -> None:
        """Re-log every job touched since the last good fsync into a fresh segment."""
        if self.lookup is None:
            raise BinlogSyncError("cannot re-log after a failed fsync: no lookup bound")
        if self._active.number == self._untrusted:
            self._rotate(sync_old=False)
        for jid in sorted(self._touched):
            rec = self.lookup(jid)
            if rec is None:
                self.delete(jid)
            else:
                self._log_put(rec, copy=True)
        self._relog_pending = False
        self._dirty = True

    # --------------------------------------------------------------- event loop

    def next_deadline(self) -> float | None:
        """Monotonic time ``tick`` is next due (0.0: at once), or None if nothing is."""
        due: float | None = None
        if self._dirty or self._relog_pending:
            ms = self.options.fsync_ms
            if ms == 0:
                return 0.0
            if ms is not None:
                due = self._last_sync + ms / 1000.0
        if self._maintenance_pending():
            return 0.0
        return due

    def tick(self, now: float) -> None:
        """fsync if due under the policy, then one bounded step of maintenance.

        Raises BinlogSyncError when a due fsync failed (maintenance errors are logged and
        retried later).
        """
        self._now = now
        ms = self.options.fsync_ms
        pending = self._dirty or self._relog_pending
        if pending and ms is not None and (ms == 0 or now >= self._last_sync + ms / 1000.0):
            self._last_sync = now
            self.sync()
        if now >= self._maintenance_after:
            try:
                self._maintain()
            except BinlogError as exc:
                log.warning("binlog maintenance postponed: %s", exc)
                self._maintenance_after = now + _MAINTENANCE_BACKOFF

    # -------------------------------------------------------------- maintenance

    def _oldest(self) -> SegmentMeta:
        return self._segments[next(iter(self._segments))]

    def _total_bytes(self) -> int:
        return sum(seg.size for seg in self._segments.values())

    def _compaction_due(self) -> bool:
        return should_compact(
            self._total_bytes(), self._live_bytes, len(self._segments) - 1,
            self.options.compact_ratio,
        ) and self.lookup is not None  # fmt: skip

    def _maintenance_pending(self) -> bool:
        if self._closed or self._now < self._maintenance_after:
            return False
        oldest = self._oldest()
        return removable(oldest.live, oldest is self._active) or self._compaction_due()

    def _maintain(self) -> None:
        for _ in range(_UNLINKS_PER_TICK):
            oldest = self._oldest()
            if not removable(oldest.live, oldest is self._active):
                break
            self._remove_oldest(oldest)
        if self._compaction_due():
            self.compact_step(self.options.compact_budget)

    def _remove_oldest(self, oldest: SegmentMeta) -> None:
        # Copies out of this segment must be durable before it goes.
        if self._durable:
            self.sync()
        try:
            self.ops.unlink(oldest.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BinlogError(describe_oserror("cannot remove", oldest.path, exc)) from exc
        del self._segments[oldest.number]
        log.debug("binlog: removed %s", oldest.path)

    def compact_step(self, budget: int) -> int:
        """Copy up to ``budget`` live jobs out of the oldest segment; returns the count.

        Bounded work (at most ``8 * budget`` index entries examined), so the event loop
        stays responsive with millions of jobs. Raises BinlogWriteError on write failure.
        """
        oldest = self._oldest()
        if oldest is self._active or self.lookup is None:
            return 0
        ids = oldest.ids
        i = oldest.cursor
        copied = 0
        limit = min(len(ids), i + 8 * budget)
        number = oldest.number
        while i < limit and copied < budget and oldest.live > 0:
            jid = ids[i]
            home = self._home.get(jid)
            if home is not None and home >> HOME_SHIFT == number:
                rec = self.lookup(jid)
                if rec is None:
                    # The server no longer has it but the log thinks it is live: make the
                    # log agree rather than resurrect it at the next start.
                    log.warning("binlog: job %d unknown to the server; logging its delete", jid)
                    self.delete(jid)
                else:
                    self._log_put(rec, copy=True)
                    self._migrated += 1
                copied += 1
            i += 1
        oldest.cursor = i
        return copied

    # --------------------------------------------------------------- reporting

    def file_of(self, job_id: int) -> int:
        """Number of the segment holding the job's latest full record (0 if none)."""
        home = self._home.get(job_id)
        return 0 if home is None else home >> HOME_SHIFT

    def stats(self) -> BinlogStats:
        """Counters for the server's ``stats`` and for monitoring."""
        return BinlogStats(
            oldest_index=next(iter(self._segments)),
            current_index=self._active.number,
            records_written=self._written,
            records_migrated=self._migrated,
            max_size=self.options.segment_size,
            segments=len(self._segments),
            total_bytes=self._total_bytes(),
            live_jobs=len(self._home),
            live_bytes=self._live_bytes,
            syncs=self._syncs,
        )

    @property
    def next_id(self) -> int:
        """One more than the highest job id ever logged or recovered."""
        return self._next_id

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """fsync (unless the policy is never), close the segment and release the lock."""
        if self._closed:
            return
        try:
            if self._durable:
                self.sync()
        finally:
            self._closed = True
            if self._active.fd is not None:
                if self._tail_dirty:
                    with contextlib.suppress(OSError):
                        self.ops.truncate(self._active.fd, self._active.size)
                with contextlib.suppress(OSError):
                    self.ops.close(self._active.fd)
                self._active.fd = None
            self._lock.release()

    def __enter__(self) -> Binlog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
