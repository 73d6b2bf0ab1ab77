"""What the dashboard may take from the process: ``Admission`` (connections and the
descriptors left for jobs) and ``Budget`` (a token bucket: accepts, requests per second).

The dashboard must never cost the jobs anything. Every descriptor it holds is one a job
cannot spawn with, so it holds at most ``MAX_CONNECTIONS`` and takes a new one only while
the process has more than ``descriptor_reserve`` descriptors left below ``RLIMIT_NOFILE``'s
soft limit. Every accept and request is CPU the brokers share, so both are paced: a flood
waits in the kernel's backlog and in its own connections, never in the supervisor's CPU.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable

MAX_CONNECTIONS = 32  # a browser opens up to 6 per host; a few operators, ctl and Prometheus
ACCEPTS_PER_SECOND, ACCEPT_BURST = 200.0, 100
REQUESTS_PER_SECOND, REQUEST_BURST = 100.0, 50  # a page polls once a second
COUNT_EVERY = 1.0  # seconds between counts of the open descriptors (a count costs ~1 ms)


def descriptor_reserve(soft: int) -> int:
    """Descriptors the dashboard leaves to jobs: a quarter of the limit, at least 256,
    at most half of it (a tiny limit still leaves the dashboard some)."""
    return min(max(256, soft // 4), soft // 2)


def open_descriptors() -> int | None:
    """How many descriptors the process has open (None where /proc is absent)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


class Admission:
    """Counts the dashboard's connections and decides whether one more may be served.

    ``admit(fd)`` takes a slot or says why not; ``release()`` gives it back. ``fd`` is the
    new connection's descriptor number: descriptors are allocated lowest first, so a number
    at the threshold proves as many are open without counting them.
    """

    def __init__(
        self,
        limit: int = MAX_CONNECTIONS,
        soft_limit: Callable[[], int] = lambda: resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        count: Callable[[], int | None] = open_descriptors,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.open = 0
        self._soft_limit = soft_limit
        self._count = count
        self._clock = clock
        self._counted: tuple[float, int | None] | None = None

    def admit(self, fd: int) -> str | None:
        """None when the connection may be served (it then holds a slot), else the reason."""
        if self.open >= self.limit:
            return f"{self.limit} connections already open"
        soft = self._soft_limit()
        if soft != resource.RLIM_INFINITY:
            threshold = soft - descriptor_reserve(soft)
            if fd >= threshold or self._counted_now() >= threshold:
                return f"fewer than {descriptor_reserve(soft)} descriptors left for jobs"
        self.open += 1
        return None

    def _counted_now(self) -> int:
        now = self._clock()
        if self._counted is None or now - self._counted[0] >= COUNT_EVERY:
            self._counted = (now, self._count())
        return self._counted[1] or 0

    def release(self) -> None:
        self.open -= 1


class Budget:
    """A token bucket: ``rate`` per second, at most ``burst`` saved up."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst = rate, float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def wait(self) -> float:
        """Take a token: the seconds to wait before using it (0.0: use it now)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
