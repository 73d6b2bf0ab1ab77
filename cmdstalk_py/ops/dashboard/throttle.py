"""``LogThrottle``: at most one log line per kind of event per interval.

What the dashboard logs about its clients (a reset connection, a malformed request, a
connection refused over the cap) is theirs to repeat as often as they like: a flood must
cost the log a line every ``every`` seconds, each saying how many it stands for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

EVERY = 10.0


class LogThrottle:
    """Logs the first event of each ``kind``, then at most one per ``every`` seconds with
    the count of those left out since. Kinds are names the code chooses, never input."""

    def __init__(
        self,
        logger: logging.Logger,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._every = every
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}  # kind: (logged at, left out since)

    def log(self, kind: str, level: int, message: str, *args: object,
            exc_info: BaseException | None = None) -> None:  # fmt: skip
        if not self._log.isEnabledFor(level):
            return
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last[0] < self._every:
            self._last[kind] = (last[0], last[1] + 1)
            return
        if last is not None and last[1]:
            message += f" (and {last[1]} more in the previous {self._every:g} s)"
        self._log.log(level, message, *args, exc_info=exc_info)
        self._last[kind] = (now, 0)
