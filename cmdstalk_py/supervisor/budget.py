"""``--max-jobs``: a budget of jobs shared by every broker of one supervisor."""

from __future__ import annotations

import threading


class JobBudget:
    """``--max-jobs``, shared by all brokers: a ticket per reservation, counted when done.

    A broker takes a ticket before it reserves and gives it back when the reserve times
    out, so at most ``limit`` jobs are ever reserved; ``spent`` once ``limit`` finished.
    """

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._left = limit
        self._finished = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take a ticket before reserving; False when none are free right now."""
        if self._left is None:
            return True
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True

    def give_back(self) -> None:
        """The reserve found no job: the ticket returns to the pool."""
        if self._left is None:
            return
        with self._lock:
            self._left += 1

    def finish(self) -> None:
        """A job reserved with a ticket is done."""
        if self._limit is None:
            return
        with self._lock:
            self._finished += 1

    @property
    def spent(self) -> bool:
        """All ``limit`` jobs are finished: time to exit."""
        return self._limit is not None and self._finished >= self._limit

    @property
    def busy(self) -> bool:
        """No ticket free now (others are reserving or running with them)."""
        return self._left is not None and self._left <= 0
