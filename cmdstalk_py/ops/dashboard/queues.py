"""``QueueView``: the supervisor's tubes as the server sees them, only when someone looks.

A dashboard nobody has open must cost the server nothing: stats are fetched when a page
or an ``/api`` client asks, at most once per ``min_interval`` (a second), on the
dashboard's own connection; several pages share one sample. Rates are the difference
between two samples (puts: ``total-jobs``, deletes: ``cmd-delete``) over their interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from cmdstalk_py.client.errors import CONNECTION_ERRORS, NotFound
from cmdstalk_py.client.pipeline import Client

TIMEOUT = 5.0  # seconds to connect and for each reply: a page must not hang on the server
FIELDS = {
    "current-jobs-ready": "ready",
    "current-jobs-reserved": "reserved",
    "current-jobs-delayed": "delayed",
    "current-jobs-buried": "buried",
    "current-jobs-urgent": "urgent",
    "current-waiting": "waiting",
    "pause-time-left": "paused",
}
RATES = {"total-jobs": "puts_per_s", "cmd-delete": "deletes_per_s"}


class QueueView:
    """stats-tube of ``tubes()`` on ``address``, sampled on demand."""

    def __init__(
        self,
        address: str,
        tubes: Callable[[], list[str]],
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self._tubes = tubes
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._sampled_at: float | None = None
        self._raw: dict[str, dict[str, Any]] = {}
        self._view: dict[str, Any] = {"up": None, "error": None, "tubes": []}
        self.samples = 0  # how many times the server was asked (tests: none when unseen)

    def snapshot(self) -> dict[str, Any]:
        """The latest sample, taken now if the last one is older than ``min_interval``."""
        with self._lock:
            now = self._clock()
            if self._sampled_at is None or now - self._sampled_at >= self._min_interval:
                self._sample(now)
            return self._view

    def _sample(self, now: float) -> None:
        self.samples += 1
        try:
            raw = self._stats()
        except CONNECTION_ERRORS as e:
            self._drop()
            self._view = {"up": False, "error": str(e) or type(e).__name__, "tubes": []}
            self._sampled_at, self._raw = now, {}
            return
        seconds = now - self._sampled_at if self._sampled_at is not None else 0.0
        tubes = [self._row(name, stats, seconds) for name, stats in raw.items()]
        self._view = {"up": True, "error": None, "tubes": tubes}
        self._sampled_at, self._raw = now, raw

    def _stats(self) -> dict[str, dict[str, Any]]:
        if self._client is None:
            self._client = Client.connect(self.address, timeout=TIMEOUT)
        found = {}
        for tube in sorted(self._tubes()):
            try:
                found[tube] = dict(self._client.stats_tube(tube))
            except NotFound:
                continue  # no job and nobody watching it right now: not there to show
        return found

    def _row(self, tube: str, stats: dict[str, Any], seconds: float) -> dict[str, Any]:
        row: dict[str, Any] = {"tube": tube, **{k: stats.get(f) for f, k in FIELDS.items()}}
        old = self._raw.get(tube)
        for field, key in RATES.items():
            if old is None or seconds <= 0:
                row[key] = None
            else:
                row[key] = round(max(0, stats[field] - old[field]) / seconds, 2)
        return row

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._drop()
