"""``Lease``: a deadline its owner may move while the command runs, and work on a timer.

``run_command`` takes either a fixed ``deadline`` or a ``Lease``. With a lease it keeps one
loop timer at the earlier of the kill point (``deadline``) and the time the owner next
wants to do its timed work (``next_tick``), and calls ``tick`` once that time has come.
Everything happens on the event loop running the command, so ``tick`` must never block: it
starts its work (a touch of the job on the broker's connection) and returns. When the
deadline or the next tick changes by itself (a touch's reply arrived, the reservation was
lost), the owner calls the ``wake`` it was given by ``attach`` and the run re-reads both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cmdstalk_py.process.result import KillReason


class Lease(Protocol):
    """The owner's view of how long a command may run."""

    def attach(self, wake: Callable[[], None]) -> None:
        """Take the run's ``wake``: call it (on the loop) whenever ``deadline()`` or
        ``next_tick()`` changed other than inside ``tick``. Called once, before the run."""
        ...

    def deadline(self) -> tuple[float, KillReason]:
        """When (``time.monotonic()``) to send SIGTERM, and the reason the result gives."""
        ...

    def next_tick(self) -> float | None:
        """When ``tick`` wants to be called next (None: no need)."""
        ...

    def tick(self, now: float) -> None:
        """Do the timed work (it may move the deadline). Must not block or raise."""
        ...


class FixedLease:
    """A deadline that never moves (the plain ``deadline=`` argument)."""

    __slots__ = ("_deadline",)

    def __init__(self, at: float, reason: KillReason = KillReason.TTR) -> None:
        self._deadline = (at, reason)

    def attach(self, wake: Callable[[], None]) -> None:
        return None  # nothing ever changes by itself

    def deadline(self) -> tuple[float, KillReason]:
        return self._deadline

    def next_tick(self) -> float | None:
        return None

    def tick(self, now: float) -> None:
        return None
