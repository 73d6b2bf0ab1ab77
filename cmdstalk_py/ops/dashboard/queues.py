"""``QueueView``: the supervisor's tubes as one server sees them, only when someone looks;
``Queues``: one view per server the supervisor serves, asked together.

A dashboard nobody has open must cost the servers nothing: stats are fetched when a page
or an ``/api`` client asks, at most once per ``min_interval`` (a second) per server, on the
dashboard's own connection to each; several pages share one sample. Rates are the
difference between two samples of one server (puts: ``total-jobs``, deletes:
``cmd-delete``) over their interval. Servers are asked in parallel, so a silent one holds a
page up for its own timeout at most, never one timeout per server, and its rows alone go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
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
        row: dict[str, Any] = {"tube": tube, "server": self.address,
                               **{k: stats.get(f) for f, k in FIELDS.items()}}  # fmt: skip
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


class Queues:
    """A ``QueueView`` per server of ``servers()`` (in its order), merged for ``/api``; each
    shows ``tubes(server)``, the tubes of the pools serving that server.

    ``servers()`` is asked at each look, so a reload that adds a server shows it and one
    that drops a server closes its view. ``snapshot()`` keeps the shape one server gave
    before several were served: ``up`` (every server answered; None until asked),
    ``error`` (the reasons, each named by its server when there are several) and ``tubes``
    (every server's rows, each naming its ``server``); ``servers`` adds each server's own
    ``up`` and ``error``.
    """

    def __init__(
        self, servers: Callable[[], Sequence[str]], tubes: Callable[[str], list[str]]
    ) -> None:
        self._servers = servers
        self._tubes = tubes
        self._lock = threading.Lock()
        self._views: dict[str, QueueView] = {}

    @property
    def servers(self) -> list[str]:
        """The servers the supervisor serves now, each once, the first pool's first first."""
        return list(dict.fromkeys(self._servers()))

    def views(self) -> list[QueueView]:
        """A view per server served now; the views of servers no longer served are closed."""
        names = self.servers
        with self._lock:
            gone = [self._views.pop(name) for name in set(self._views) - set(names)]
            for name in names:
                if name not in self._views:
                    self._views[name] = QueueView(name, partial(self._tubes, name))
            views = [self._views[name] for name in names]
        for view in gone:  # outside the lock: it may wait for a sample under way
            view.close()
        return views

    def snapshot(self) -> dict[str, Any]:
        """Every server's latest sample, each taken now if it is older than a second."""
        views = self.views()
        parts = [(v.address, s) for v, s in zip(views, self._snapshots(views), strict=True)]
        servers = [{"server": a, "up": s["up"], "error": s["error"]} for a, s in parts]
        ups = [s["up"] for _, s in parts]
        errors = [(a, s["error"]) for a, s in parts if s["error"]]
        if len(parts) == 1:
            error = errors[0][1] if errors else None
        else:
            error = "; ".join(f"{a}: {e}" for a, e in errors) or None
        return {
            "up": None if None in ups or not ups else all(ups),
            "error": error,
            "tubes": [row for _, s in parts for row in s["tubes"]],
            "servers": servers,
        }

    @staticmethod
    def _snapshots(views: list[QueueView]) -> list[dict[str, Any]]:
        if len(views) == 1:
            return [views[0].snapshot()]
        found: list[dict[str, Any]] = [{} for _ in views]

        def ask(index: int) -> None:
            try:
                found[index] = views[index].snapshot()
            except Exception as e:  # a thread has nobody to raise to: this server's row says it
                found[index] = {"up": False, "error": f"{type(e).__name__}: {e}", "tubes": []}

        # Daemon threads, not an executor's: a server gone silent while the supervisor
        # stops must not hold up its exit for the rest of the timeout.
        threads = [threading.Thread(target=ask, args=(i,), name="cmdstalk-dashboard-queues",
                                    daemon=True) for i in range(len(views))]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return found

    def close(self) -> None:
        with self._lock:
            views, self._views = list(self._views.values()), {}
        for view in views:
            view.close()
