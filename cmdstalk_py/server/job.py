"""The job model: one object per job, with its persisted fields and runtime bookkeeping."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from enum import Enum

    from cmdstalk_py.server.session import Session
    from cmdstalk_py.server.tube import Tube
else:
    from cmdstalk_py.server.standins import Enum


class JobState(Enum):
    """Where a job is in its lifecycle (docs §5.1)."""

    READY = "ready"
    DELAYED = "delayed"
    RESERVED = "reserved"
    BURIED = "buried"
    #: Gone for good: timers and queue entries still pointing at it are stale.
    DELETED = "deleted"


READY = JobState.READY
DELAYED = JobState.DELAYED
RESERVED = JobState.RESERVED
BURIED = JobState.BURIED
DELETED = JobState.DELETED

#: Jobs with a priority below this count as urgent (``current-jobs-urgent``).
URGENT_THRESHOLD = 1024

#: A job's changeable persisted fields, as saved by :meth:`Job.mark`.
Mark = tuple[JobState, int, int, float, int, int, int, int, int]


class Job:
    """A job. ``body`` keeps the CRLF that ended it on the wire (it is sent back as is).

    Persisted fields: id, tube name, pri, delay, ttr, body, created, deadline, state and
    the five counters. Runtime bookkeeping, never persisted: ``heap_index`` (position in
    the tube's ready or delay heap), ``reserver`` (the session holding the reservation)
    and ``jref`` (reserved for the journal, e.g. which log file holds the job).
    Times are seconds on the engine's clock (the caller's ``now``).
    """

    __slots__ = (
        "body",
        "buries",
        "created",
        "deadline",
        "delay",
        "heap_index",
        "id",
        "jref",
        "kicks",
        "pri",
        "releases",
        "reserver",
        "reserves",
        "state",
        "timeouts",
        "ttr",
        "tube",
    )

    def __init__(
        self,
        job_id: int,
        tube: Tube,
        pri: int,
        delay: int,
        ttr: int,
        body: bytes,
        created: float,
    ) -> None:
        self.id = job_id
        self.tube = tube
        self.pri = pri
        self.delay = delay
        self.ttr = ttr
        self.body = body
        self.created = created
        # Delayed: when it becomes ready. Reserved: the TTR deadline. Otherwise unused.
        self.deadline = 0.0
        self.state = READY
        self.reserves = 0
        self.timeouts = 0
        self.releases = 0
        self.buries = 0
        self.kicks = 0
        self.heap_index = -1
        self.reserver: Session | None = None
        self.jref: object = None

    def mark(self) -> Mark:
        """The persisted fields a transition may change, for :meth:`rollback`."""
        return (self.state, self.pri, self.delay, self.deadline, self.reserves,
                self.timeouts, self.releases, self.buries, self.kicks)

    def rollback(self, mark: Mark) -> None:
        """Put back the fields saved by :meth:`mark` (the journal refused the change)."""
        (self.state, self.pri, self.delay, self.deadline, self.reserves,
         self.timeouts, self.releases, self.buries, self.kicks) = mark

    @property
    def size(self) -> int:
        """Body length in bytes, without the trailing CRLF."""
        return len(self.body) - 2

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.state.value} pri={self.pri}>"
