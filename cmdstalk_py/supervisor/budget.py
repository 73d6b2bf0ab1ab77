"""``--max-jobs``: a budget of jobs shared by every broker of one supervisor."""

from __future__ import annotations

from collections.abc import Callable


class JobBudget:
    """``--max-jobs``, shared by all brokers: a ticket per reservation, counted when done.

    A broker takes a ticket before it reserves and gives it back when the reserve times
    out, so at most ``limit`` jobs are ever reserved; ``spent`` once ``limit`` finished.
    It lives on the supervisor's event loop (one owner, no lock): a broker waiting for a
    ticket registers a wake-up with ``subscribe``, called when one comes back or the
    budget is spent.
    """

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._left = limit
        self._finished = 0
        self._subscribers: list[Callable[[], None]] = []

    def take(self) -> bool:
        """Take a ticket before reserving; False when none are free right now."""
        if self._left is None:
            return True
        if self._left <= 0:
            return False
        self._left -= 1
        return True

    def give_back(self) -> None:
        """The reserve found no job: the ticket returns to the pool."""
        if self._left is None:
            return
        self._left += 1
        self._notify()

    def finish(self) -> None:
        """A job reserved with a ticket is done."""
        if self._limit is None:
            return
        self._finished += 1
        if self.spent:
            self._notify()

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when a ticket comes back or the budget is spent."""
        self._subscribers.append(callback)

    def _notify(self) -> None:
        subscribers, self._subscribers = self._subscribers, []
        for callback in subscribers:
            callback()

    @property
    def limited(self) -> bool:
        """``--max-jobs`` is set: tickets are scarce, and a worker must not keep one idle."""
        return self._limit is not None

    @property
    def spent(self) -> bool:
        """All ``limit`` jobs are finished: time to exit."""
        return self._limit is not None and self._finished >= self._limit

    @property
    def busy(self) -> bool:
        """No ticket free now (others are reserving or running with them)."""
        return self._left is not None and self._left <= 0
