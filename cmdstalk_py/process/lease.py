"""``Lease``: a deadline its owner may move while the command runs, and work on a timer.

``run_command`` takes either a fixed ``deadline`` or a ``Lease``. With a lease it asks,
on every round of its poll loop, when to kill the command (``deadline``) and when the
owner next wants the thread (``next_tick``), and calls ``tick`` once that time has come.
Everything happens on the thread running the command: an owner can use a connection that
only this thread touches (the broker touches its job on its own connection this way).
"""

from __future__ import annotations

from typing import Protocol

from cmdstalk_py.process.result import KillReason


class Lease(Protocol):
    """The owner's view of how long a command may run."""

    def deadline(self) -> tuple[float, KillReason]:
        """When (``time.monotonic()``) to send SIGTERM, and the reason the result gives."""
        ...

    def next_tick(self) -> float | None:
        """When ``tick`` wants to be called next (None: no need)."""
        ...

    def tick(self, now: float) -> None:
        """Do the timed work (it may move the deadline). Should not raise."""
        ...


class FixedLease:
    """A deadline that never moves (the plain ``deadline=`` argument)."""

    __slots__ = ("_deadline",)

    def __init__(self, at: float, reason: KillReason = KillReason.TTR) -> None:
        self._deadline = (at, reason)

    def deadline(self) -> tuple[float, KillReason]:
        return self._deadline

    def next_tick(self) -> float | None:
        return None

    def tick(self, now: float) -> None:
        return None
