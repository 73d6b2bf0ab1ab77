"""The durability hook: what the engine tells a write-ahead log about job changes.

The engine calls the journal *before* applying a change. If the journal raises
:class:`JournalError` the change is not applied: ``put`` answers OUT_OF_MEMORY, the other
commands INTERNAL_ERROR. Changes driven by the clock or by a disconnect (TTR expiry, delay
end, release of a closed connection's jobs) cannot be refused; their journal errors are
ignored and the journal is expected to catch up on the next record it writes.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)

if TYPE_CHECKING:
    from typing import Protocol

    from cmdstalk_py.server.job import Job
else:
    Protocol = object  # the protocols below are for mypy; at run time, plain classes


class JournalError(Exception):
    """The journal could not record a change (disk full, I/O error)."""


class Journal(Protocol):
    """What the engine needs from a write-ahead log."""

    def job_put(self, job: Job) -> None:
        """A new job, complete with tube, body and state, is about to be created."""

    def job_changed(self, job: Job) -> None:
        """A persisted field (state, pri, delay, deadline, counter) of ``job`` changed."""

    def job_deleted(self, job: Job) -> None:
        """``job`` is about to be deleted."""

    def file_of(self, job: Job) -> int:
        """The log file number holding ``job`` (stats-job ``file``), 0 if none."""
        ...

    def stats(self) -> tuple[int, int, int, int, int]:
        """(oldest index, current index, records migrated, records written, max size)."""
        ...


class DurableJournal(Journal, Protocol):
    """A journal that writes to disk and must be driven by the event loop (``-b``).

    The network layer calls :meth:`sync_due` after the commands of a loop iteration ran
    (and, with ``sync_each``, before their replies go out), then :meth:`maintain` once the
    replies that waited for it are sent; it arms its timer at :meth:`next_deadline`, and
    while ``sync_each`` and :attr:`needs_sync` holds every reply back until the changes
    are durable.
    """

    @property
    def sync_each(self) -> bool:
        """``-f 0``: no reply may leave before the changes it follows are on disk."""
        ...

    @property
    def needs_sync(self) -> bool:
        """Changes were written that are not durable yet."""
        ...

    def sync_due(self, now: float) -> bool:
        """fsync if the policy says it is due; False if the fsync failed."""
        ...

    def maintain(self, now: float) -> None:
        """One bounded step of maintenance (its errors are logged, not raised)."""

    def next_deadline(self) -> float | None:
        """When :meth:`sync_due` or :meth:`maintain` is next due (on the engine's clock),
        None when never."""
        ...

    def close(self) -> None:
        """Make pending changes durable (unless never) and release the files."""


class NullJournal:
    """The in-memory default: records nothing, never fails."""

    def __init__(self, max_size: int = 10485760) -> None:
        self.max_size = max_size

    def job_put(self, job: Job) -> None:
        """Nothing to record."""

    def job_changed(self, job: Job) -> None:
        """Nothing to record."""

    def job_deleted(self, job: Job) -> None:
        """Nothing to record."""

    def file_of(self, job: Job) -> int:
        """No file holds anything."""
        return 0

    def stats(self) -> tuple[int, int, int, int, int]:
        """beanstalkd without ``-b`` prints zeros and the default ``-s``."""
        return (0, 0, 0, 0, self.max_size)
