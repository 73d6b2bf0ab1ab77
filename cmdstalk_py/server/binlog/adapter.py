"""``BinlogJournal``: the server engine's ``Journal`` hook backed by a ``Binlog``.

The engine (``cmdstalk_py.server.engine``) calls ``job_put`` / ``job_changed`` /
``job_deleted`` before applying a change, with the job already carrying its new values;
a ``JournalError`` makes it refuse the change (``put`` -> OUT_OF_MEMORY, anything else ->
INTERNAL_ERROR). This adapter turns a ``Job`` into a ``JobRecord`` and back:

* the engine's clock (monotonic, the caller's ``now``) becomes wall-clock epoch seconds
  for ``created_at`` and a delayed job's deadline, so ages and remaining delays survive a
  restart (the offset between the two clocks is taken once, at start-up);
* a reserved job is logged as ready (it comes back ready, like beanstalkd); its counters
  (reserves, timeouts, ...) are logged with every change, so they come back as they were;
* the body is logged as the engine keeps it (with its trailing CRLF), without a copy.

Start-up: ``BinlogJournal.open(directory, options)`` locks and recovers the directory,
``restore(engine, now)`` rebuilds the jobs in the engine and binds the engine as the
binlog's lookup (for compaction and re-logging). Then the event loop calls
``tick(now)`` once per iteration *before sending replies* and includes
``next_deadline()`` in its timer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from cmdstalk_py.server.binlog.errors import BinlogError, BinlogSyncError
from cmdstalk_py.server.binlog.log import Binlog
from cmdstalk_py.server.binlog.options import BinlogOptions
from cmdstalk_py.server.binlog.record import JobRecord, StoredState
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.job import BURIED, DELAYED, RESERVED, Job
from cmdstalk_py.server.journal import JournalError

log = logging.getLogger("cmdstalk_py.server.binlog")

_TO_RECORD = {BURIED: StoredState.BURIED, DELAYED: StoredState.DELAYED}  # others: READY


class BinlogJournal:
    """A ``Journal`` writing to a ``Binlog`` (see module docstring)."""

    def __init__(
        self,
        binlog: Binlog,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.binlog = binlog
        # wall-clock epoch = engine time + offset (engine time is ``clock``'s).
        self.offset = wall() - clock()

    @classmethod
    def open(
        cls,
        directory: str,
        options: BinlogOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> BinlogJournal:
        """Lock and recover ``directory``. Raises BinlogError subclasses (exit with it)."""
        return cls(Binlog(directory, options), clock, wall)

    # ---------------------------------------------------------------- start-up

    def restore(self, engine: Engine, now: float) -> int:
        """Rebuild the recovered jobs in ``engine``; returns how many.

        Delayed jobs keep their original deadline (ready at once if it passed), reserved
        ones were logged as ready. The engine's next id moves past every id ever logged.
        """
        offset = self.offset
        recovery = self.binlog.recovery
        for rec in recovery.jobs.values():
            job = Job(rec.id, engine.tubes.tube(rec.tube), rec.pri, rec.delay, rec.ttr, rec.body,
                      rec.created_at - offset)  # fmt: skip
            if rec.state is StoredState.DELAYED:
                job.state = DELAYED
                job.deadline = rec.deadline - offset
            elif rec.state is StoredState.BURIED:
                job.state = BURIED
            job.reserves = rec.reserves
            job.timeouts = rec.timeouts
            job.releases = rec.releases
            job.buries = rec.buries
            job.kicks = rec.kicks
            engine.restore(job, rec.tube, now)
        engine.next_id = max(engine.next_id, recovery.next_id)
        self.binlog.lookup = lambda job_id: self._lookup(engine, job_id)
        return len(recovery.jobs)

    def _lookup(self, engine: Engine, job_id: int) -> JobRecord | None:
        job = engine.jobs.get(job_id)
        return None if job is None else self.record(job)

    def record(self, job: Job) -> JobRecord:
        """The persisted form of ``job``."""
        state = _TO_RECORD.get(job.state, StoredState.READY)
        return JobRecord(
            job.id, job.tube.name, job.body, job.pri, job.ttr, job.delay, state,
            job.created + self.offset,
            job.deadline + self.offset if state is StoredState.DELAYED else 0.0,
            job.reserves, job.timeouts, job.releases, job.buries, job.kicks,
        )  # fmt: skip

    # ----------------------------------------------------------------- Journal

    def job_put(self, job: Job) -> None:
        """Log a new job; JournalError (OUT_OF_MEMORY) when it cannot be written."""
        try:
            self.binlog.put(self.record(job))
        except BinlogError as exc:
            raise JournalError(str(exc)) from exc

    def job_changed(self, job: Job) -> None:
        """Log a job's new state; JournalError (INTERNAL_ERROR) when it cannot be.

        A reserve changes only the ``reserves`` counter on disk (a reserved job is logged
        as ready), so under ``-f 0`` its reply does not wait for the fsync.
        """
        try:
            self.binlog.update(self.record(job), urgent=job.state is not RESERVED)
        except BinlogError as exc:
            raise JournalError(str(exc)) from exc

    def job_deleted(self, job: Job) -> None:
        """Log a deletion; JournalError (INTERNAL_ERROR) when it cannot be written."""
        try:
            self.binlog.delete(job.id)
        except BinlogError as exc:
            raise JournalError(str(exc)) from exc

    def file_of(self, job: Job) -> int:
        """stats-job ``file``: the segment holding the job's full record."""
        return self.binlog.file_of(job.id)

    def stats(self) -> tuple[int, int, int, int, int]:
        """(oldest index, current index, records migrated, records written, max size)."""
        s = self.binlog.stats()
        return (s.oldest_index, s.current_index, s.records_migrated, s.records_written,
                s.max_size)  # fmt: skip

    # -------------------------------------------------------------- event loop

    def tick(self, now: float) -> bool:
        """fsync if due, then a bounded maintenance step. False if the fsync failed.

        Call once per event-loop iteration after the commands read in it were executed
        and *before* their replies are written (with ``fsync_ms=0`` that is the group
        commit). On False the records are not durable yet (logged here; the binlog
        retries in a fresh segment on the next call).
        """
        if not self.sync_due(now):
            return False
        self.maintain(now)
        return True

    def sync_due(self, now: float) -> bool:
        """The fsync half of :meth:`tick` (the network layer sends the replies that waited
        for it before it calls :meth:`maintain`). False if the fsync failed."""
        try:
            self.binlog.sync_if_due(now)
        except BinlogSyncError as exc:
            log.error("binlog: %s", exc)
            return False
        return True

    def maintain(self, now: float) -> None:
        """The maintenance half of :meth:`tick`: one bounded step, errors logged."""
        self.binlog.maintain(now)

    def next_deadline(self) -> float | None:
        """When ``tick`` is next due on the engine's clock (None: no need)."""
        return self.binlog.next_deadline()

    @property
    def sync_each(self) -> bool:
        """``-f 0``: every change must be durable before the reply that follows it."""
        return self.binlog.options.fsync_ms == 0

    @property
    def needs_sync(self) -> bool:
        """Records replies wait for are not durable yet (with ``fsync_ms=0``: hold them)."""
        return self.binlog.replies_wait

    def close(self) -> None:
        """fsync what is pending (unless ``-F``), release the directory."""
        self.binlog.close()
