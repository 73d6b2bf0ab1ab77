"""Per-connection state as the engine sees it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cmdstalk_py.server.job import Job
    from cmdstalk_py.server.tube import Tube


class Session:
    """One client connection: used tube, watch list, reservations, reserve wait."""

    __slots__ = (
        "closed",
        "owner",
        "producer",
        "put_pending",
        "reserved",
        "use",
        "wait_deadline",
        "waiting",
        "wake_seq",
        "watch",
        "worker",
    )

    def __init__(self, default: Tube, owner: object = None) -> None:
        self.use = default
        # Order matters for list-tubes-watched (1.12 appends, and swap-removes on ignore).
        self.watch: list[Tube] = [default]
        self.reserved: dict[Job, None] = {}
        self.waiting = False
        # When a blocked reserve-with-timeout gives up (None: never).
        self.wait_deadline: float | None = None
        # Sequence number of this waiter's live alarm (timeout or DEADLINE_SOON margin).
        self.wake_seq = -1
        self.producer = False
        self.worker = False
        self.closed = False
        # The network layer's connection object, opaque to the engine.
        self.owner = owner
        self.put_pending = False

    def soonest_deadline(self) -> float | None:
        """The earliest TTR deadline among this connection's reservations."""
        if not self.reserved:
            return None
        return min(j.deadline for j in self.reserved)
