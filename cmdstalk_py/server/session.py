"""Per-connection state as the engine sees it: tubes, reservations, a blocked reserve.

Also the one DEADLINE_SOON rule (docs §4.2): a connection holding a reservation whose
TTR ends within :data:`SAFETY_MARGIN` is answered DEADLINE_SOON instead of blocking, both
when it asks (``Engine.reserve``) and while it already waits (woken at
:meth:`Session.wake_at`).
"""

from __future__ import annotations

from cmdstalk_py.server.outcome import DEADLINE_SOON, TIMED_OUT, Outcome

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from cmdstalk_py.server.job import Job
    from cmdstalk_py.server.tube import Tube

#: A reservation this close (seconds) to its TTR deadline makes reserve say DEADLINE_SOON.
SAFETY_MARGIN = 1.0


def _deadline(job: Job) -> float:
    return job.deadline


class Session:
    """One client connection: used tube, watch list, reservations, reserve wait."""

    __slots__ = (
        "closed",
        "incoming",
        "owner",
        "producer",
        "reserved",
        "soonest",
        "use",
        "wait_deadline",
        "waiting",
        "wake_seq",
        "watch",
        "watch_index",
        "worker",
    )

    def __init__(self, default: Tube, owner: object = None) -> None:
        self.use = default
        # Order matters for list-tubes-watched (1.12 appends, and swap-removes on ignore).
        self.watch: list[Tube] = [default]
        # Each watched tube's position in ``watch``: watch and ignore look a tube up here
        # instead of scanning the list, whose length the client chooses.
        self.watch_index: dict[Tube, int] = {default: 0}
        self.reserved: dict[Job, None] = {}
        # The reservation whose TTR ends first, or None: not known (found again on demand,
        # like 1.12's soonest_job). Every reserve without a job asks, so it must not cost
        # a scan of what may be thousands of reservations each time. Reservations are
        # filed and taken out by the engine's store (JobStore.hold/take), which keeps
        # this right.
        self.soonest: Job | None = None
        self.waiting = False
        # When a blocked reserve-with-timeout gives up (None: never).
        self.wait_deadline: float | None = None
        # Sequence number of this waiter's live alarm (timeout or DEADLINE_SOON margin).
        self.wake_seq = -1
        self.producer = False
        # The put whose body is on its way: (job id, creation time) taken at its line.
        self.incoming: tuple[int, float] | None = None
        self.worker = False
        self.closed = False
        # The network layer's connection object, opaque to the engine.
        self.owner = owner

    # ---------------------------------------------------------------- reservations

    def retimed(self, job: Job) -> None:
        """``job``'s deadline moved (touch): another may end first now, or this one."""
        soonest = self.soonest
        if soonest is job:
            self.soonest = None
        elif soonest is not None and job.deadline < soonest.deadline:
            self.soonest = job

    def deadline_soon_at(self) -> float | None:
        """From when on a reserve is answered DEADLINE_SOON (None: no reservation)."""
        if not self.reserved:
            return None
        soonest = self.soonest
        if soonest is None:
            soonest = self.soonest = min(self.reserved, key=_deadline)
        return soonest.deadline - SAFETY_MARGIN

    def deadline_soon(self, now: float) -> bool:
        """True when a reservation's TTR ends within the safety margin of ``now``."""
        at = self.deadline_soon_at()
        return at is not None and now >= at

    # ---------------------------------------------------------------- a blocked reserve

    def start_wait(self, timeout: int, now: float) -> None:
        """Block in a reserve, queued on every watched tube; ``timeout`` -1: for ever."""
        self.waiting = True
        for t in self.watch:
            t.waiting[self] = None
        self.wait_deadline = now + timeout if timeout > 0 else None

    def end_wait(self) -> None:
        """The reserve got its answer, or was given up: leave the tubes' queues."""
        self.waiting = False
        self.wake_seq = -1
        for t in self.watch:
            del t.waiting[self]

    def wake_at(self) -> float | None:
        """When the blocked reserve must be looked at again: its timeout or, earlier,
        DEADLINE_SOON (None: only a job can end it)."""
        wake = self.wait_deadline
        soon = self.deadline_soon_at()
        if soon is not None and (wake is None or soon < wake):
            return soon
        return wake

    def wait_over(self, now: float) -> Outcome | None:
        """How the blocked reserve ends at ``now`` without a job, if it does."""
        if self.deadline_soon(now):
            # DEADLINE_SOON wins over TIMED_OUT.
            return DEADLINE_SOON
        if self.wait_deadline is not None and now >= self.wait_deadline:
            return TIMED_OUT
        return None
