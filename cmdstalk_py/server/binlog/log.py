"""The binlog: open (lock + recover), append, fsync policy, maintenance. No threads.

Driven by the server's event loop:

* ``put`` / ``update`` / ``delete`` write one framed record each with one ``pwrite`` (so
  a write error is known before the command replies) but do not fsync.
* ``tick(now)`` fsyncs when the policy says so and does a bounded amount of maintenance
  (removing unneeded old segments, copying a few live jobs out of the oldest one: the
  step is ``compaction``'s). ``next_deadline()`` says when ``tick`` is next due, for the poll
  timeout.
* With ``fsync_ms=0`` the loop calls ``tick(now)`` once per iteration, after handling
  every command read in that iteration and before sending their replies: one fsync covers
  the whole batch of pipelined commands (group commit). With ``fsync_ms=N`` fsync happens
  at most every N ms; with ``None`` never.
* A record written with ``urgent=False`` (a reserve: it changes only a counter, since a
  reserved job is persisted as ready) does not make a reply wait under ``fsync_ms=0``:
  it is synced with the next urgent record's group commit, or ``LAZY_SYNC`` seconds later.

A failed fsync is worse than a failed write: afterwards the kernel may have dropped the
unsynced pages, and a retry on the same file can report success falsely. So that segment
is abandoned: a new one is started and every job touched since the last good fsync is
re-logged there from its current state (``lookup``), then fsynced.
"""

from __future__ import annotations

import logging
import os

from cmdstalk_py.server.binlog.compaction import maintenance_pending, maintenance_step
from cmdstalk_py.server.binlog.errors import (
    BinlogClosedError,
    BinlogError,
    BinlogSyncError,
    BinlogWriteError,
    describe_oserror,
)
from cmdstalk_py.server.binlog.fsops import FileOps, RealFileOps
from cmdstalk_py.server.binlog.lock import DirLock
from cmdstalk_py.server.binlog.options import BinlogOptions, BinlogStats
from cmdstalk_py.server.binlog.record import JobRecord, Lookup
from cmdstalk_py.server.binlog.recovery import RecoveryResult, recover
from cmdstalk_py.server.binlog.writer import SegmentWriter

log = logging.getLogger("cmdstalk_py.server.binlog")

_MAINTENANCE_BACKOFF = 1.0  # seconds before retrying maintenance that hit an error
#: With fsync_ms=0, records that no reply waits for are synced at most this late.
LAZY_SYNC = 0.05


class Binlog:
    """An open, locked binlog directory: ``Binlog(directory, ...)`` or ``Binlog.open``."""

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
            rec = recover(self.ops, self.directory, self.options.save_torn_tails)
            self.recovery: RecoveryResult = rec.result
            self._w = SegmentWriter(
                self.ops, self.directory, self.options.segment_size,
                self.options.fsync_ms is not None, rec.live,
                rec.next_seq, rec.result.next_id, self.options.preallocate,
            )  # fmt: skip
        except OSError as exc:
            self._lock.release()
            raise BinlogError(describe_oserror("recovery failed in", self.directory, exc)) from exc
        except BaseException:
            self._lock.release()
            raise
        self._last_sync = float("-inf")
        # A record some reply waits for was written since the last good fsync.
        self._urgent = False
        self._maintenance_after = float("-inf")
        self._now = float("-inf")
        self._syncs = 0
        self._closed = False
        log.info(
            "binlog %s: recovered %d jobs from %d records in %d segments (%.2fs), next id %d",
            self.directory, len(self.recovery.jobs), self.recovery.records,
            self.recovery.segments, self.recovery.seconds, self.recovery.next_id,
        )  # fmt: skip

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

    # ----------------------------------------------------------------- appending

    def put(self, rec: JobRecord) -> None:
        """Log a new job (whole record). Raises BinlogWriteError; then nothing was logged."""
        if self._closed or self._w.relog_pending:
            self._before_write()
        self._w.put(rec)
        self._urgent = True

    def update(self, rec: JobRecord, urgent: bool = True) -> None:
        """Log a job's new state, priority, delay, deadline and counters (not its body).

        ``urgent=False``: no reply waits for this record (see the module docstring).
        """
        if self._closed or self._w.relog_pending:
            self._before_write()
        self._w.update(rec)
        if urgent:
            self._urgent = True

    def delete(self, job_id: int) -> None:
        """Log a job's deletion."""
        if self._closed or self._w.relog_pending:
            self._before_write()
        self._w.delete(job_id)
        self._urgent = True

    def _check_open(self) -> None:
        if self._closed:
            raise BinlogClosedError(f"binlog {self.directory} is closed")

    def _before_write(self) -> None:
        self._check_open()
        if self._w.relog_pending:
            # After a failed fsync nothing more goes into the tainted segment: a record
            # there could survive a crash while earlier ones in the same file do not.
            try:
                self._relog()
            except BinlogSyncError as exc:
                raise BinlogWriteError(str(exc)) from exc

    # ------------------------------------------------------------------ syncing

    @property
    def needs_sync(self) -> bool:
        """True when records were appended (or must be re-logged) since the last fsync."""
        return self._w.dirty or self._w.relog_pending

    @property
    def replies_wait(self) -> bool:
        """True when an urgent record is not durable yet (``fsync_ms=0``: hold replies)."""
        w = self._w
        return self._urgent and (w.dirty or w.relog_pending)

    def sync(self) -> None:
        """Make every record appended so far durable; no-op when nothing is pending.

        Raises BinlogSyncError when that cannot be done; the records stay pending and
        the next call tries again in a fresh segment.
        """
        w = self._w
        if not (w.dirty or w.relog_pending):
            return
        self._check_open()
        failure: BaseException | None = None
        for _attempt in range(2):
            try:
                if w.tail_dirty and not w.relog_pending:
                    try:
                        w.repair_tail()
                    except BinlogWriteError:
                        # fsyncing now could make a failed write's bytes durable: give up
                        # on this segment instead.
                        w.relog_pending = True
                        w.untrusted = w.active.number
                if w.relog_pending:
                    self._relog()
                w.fdatasync()
            except OSError as exc:
                failure = exc
                log.error("binlog: %s", describe_oserror("fsync failed for", w.active.path, exc))
                w.relog_pending = True
                w.untrusted = w.active.number
                continue
            except BinlogError as exc:
                failure = exc
                break
            w.dirty = False
            w.touched.clear()
            self._urgent = False
            self._syncs += 1
            return
        raise BinlogSyncError(f"binlog {self.directory}: records not durable: {failure}")

    def _relog(self) -> None:
        """Re-log every job touched since the last good fsync into a fresh segment."""
        if self.lookup is None:
            raise BinlogSyncError("cannot re-log after a failed fsync: no lookup bound")
        w = self._w
        if w.active.number == w.untrusted or w.tail_dirty:
            w.rotate(abandon=True)
        for jid in sorted(w.touched):
            rec = self.lookup(jid)
            if rec is None:
                w.delete(jid)
            else:
                w.put(rec, copy=True)
        w.relog_pending = False
        w.dirty = True

    # --------------------------------------------------------------- event loop

    def next_deadline(self) -> float | None:
        """Monotonic time ``tick`` is next due (0.0: at once), or None if nothing is."""
        due: float | None = None
        if self._w.dirty or self._w.relog_pending:
            ms = self.options.fsync_ms
            if ms == 0:
                if self._urgent or self._w.relog_pending:
                    return 0.0
                due = self._last_sync + LAZY_SYNC
            elif ms is not None:
                due = self._last_sync + ms / 1000.0
        if not self._closed and maintenance_pending(self._w, self.lookup, self.options):
            # Due at once, or when the back-off after a maintenance error ends.
            after = self._maintenance_after
            if after <= self._now:
                return 0.0
            return after if due is None else min(due, after)
        return due

    def tick(self, now: float) -> None:
        """fsync if due under the policy, then one bounded step of maintenance.

        Raises BinlogSyncError when a due fsync failed (maintenance errors are logged and
        retried a second later).
        """
        self.sync_if_due(now)
        self.maintain(now)

    def sync_if_due(self, now: float) -> None:
        """The fsync half of :meth:`tick`: fsync if due. Raises BinlogSyncError."""
        self._now = now
        ms = self.options.fsync_ms
        w = self._w
        if (w.dirty or w.relog_pending) and ms is not None:
            if ms == 0:
                due = self._urgent or w.relog_pending or now >= self._last_sync + LAZY_SYNC
            else:
                due = now >= self._last_sync + ms / 1000.0
            if due:
                self._last_sync = now
                self.sync()

    def maintain(self, now: float) -> None:
        """The maintenance half of :meth:`tick`: one bounded step (errors: logged, retried)."""
        self._now = now
        if now >= self._maintenance_after and not self._closed:
            try:
                self._w.extend_ahead()
                maintenance_step(self._w, self.lookup, self.options, self.sync)
            except BinlogError as exc:
                log.warning("binlog maintenance postponed: %s", exc)
                self._maintenance_after = now + _MAINTENANCE_BACKOFF

    # --------------------------------------------------------------- reporting

    def file_of(self, job_id: int) -> int:
        """Number of the segment holding the job's latest full record (0 if none)."""
        return self._w.index.segment_of(job_id)

    def stats(self) -> BinlogStats:
        """Counters for the server's ``stats`` and for monitoring."""
        w = self._w
        return BinlogStats(
            oldest_index=w.oldest().number,
            current_index=w.active.number,
            records_written=w.written,
            records_migrated=w.migrated,
            max_size=self.options.segment_size,
            segments=len(w.index.segments),
            total_bytes=w.total_bytes(),
            live_jobs=len(w.index),
            live_bytes=w.index.live_bytes,
            syncs=self._syncs,
        )

    @property
    def next_id(self) -> int:
        """One more than the highest job id ever logged or recovered."""
        return self._w.next_id

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """fsync (unless the policy is never), close the segment and release the lock."""
        if self._closed:
            return
        try:
            if self._w.durable:
                self.sync()
        finally:
            self._closed = True
            self._w.close()
            self._lock.release()

    def __enter__(self) -> Binlog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
