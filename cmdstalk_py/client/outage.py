"""One report per server outage, however many connections notice it.

A supervisor holds one connection per broker plus one for discovery; when the server is
down every one of them fails, reconnects with backoff and fails again. Logged one by one,
that is a warning per broker per attempt and the first line (the one with the hint) scrolls
away. ``OutageReporter`` is shared by every connection to one address: the first failure of
an outage is a WARNING with the address and a hint, further failures are DEBUG (with a
reminder WARNING every ``repeat`` seconds while it lasts), and the first success ends the
outage with one INFO line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("cmdstalk.connection")

#: Seconds between reminder warnings while the server stays unreachable.
REPEAT = 60.0

HINT = "is beanstalkd running? --embedded starts one"


class OutageReporter:
    """Rate-limited reports about one server address; thread-safe, shared by connections."""

    def __init__(
        self,
        address: str,
        *,
        repeat: float = REPEAT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self._repeat = repeat
        self._clock = clock
        self._lock = threading.Lock()
        # The current outage: since when, whether a loss and a failure were reported.
        self._since: float | None = None
        self._lost_reported = False
        self._warned_at: float | None = None
        self._failures = 0

    @property
    def down(self) -> bool:
        """True between a loss or failure and the next successful connection."""
        return self._since is not None

    def failed(self, where: str, error: object, retry_in: float) -> None:
        """A connection attempt by ``where`` failed with ``error``; it retries in ``retry_in`` s."""
        now = self._clock()
        with self._lock:
            self._failures += 1
            if self._since is None:
                self._since = now
            first = self._warned_at is None
            warn = self._warned_at is None or now - self._warned_at >= self._repeat
            if warn:
                self._warned_at = now
            since, failures = now - self._since, self._failures
        if first:
            log.warning(
                "cannot connect to %s (%s): %s; retrying with backoff",
                self.address, error, HINT,
            )  # fmt: skip
        elif warn:
            log.warning(
                "still cannot connect to %s after %.0fs, %d attempts (%s): %s",
                self.address, since, failures, error, HINT,
            )  # fmt: skip
        else:
            log.debug(
                "%s: cannot connect to %s (%s); retrying in %.1fs",
                where, self.address, error, retry_in,
            )  # fmt: skip

    def lost(self, where: str, reason: object) -> None:
        """An established connection of ``where`` broke: one warning per outage."""
        with self._lock:
            if self._since is None:
                self._since = self._clock()
            quiet, self._lost_reported = self._lost_reported, True
        level = logging.DEBUG if quiet else logging.WARNING
        log.log(level, "%s: connection to %s lost: %s", where, self.address, reason)

    def connected(self, where: str) -> None:
        """``where`` connected: this ends the outage, if there was one, with one INFO line."""
        now = self._clock()
        with self._lock:
            since, self._since = self._since, None
            failures, self._failures = self._failures, 0
            self._lost_reported = False
            self._warned_at = None
        if since is not None:
            log.info(
                "connected to %s again after %.1fs (%d failed attempts)",
                self.address, now - since, failures,
            )  # fmt: skip
        else:
            log.debug("%s: connected to %s", where, self.address)
