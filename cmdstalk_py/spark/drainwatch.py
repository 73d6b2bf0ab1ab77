"""The drain seen through the server: is it reachable, how big is each tube, how far along.

A batch drain must not retry an unreachable server forever (the supervisor's brokers do,
which is right for a daemon): :func:`wait_for_server` gives up after a bounded time with a
clear error, on the driver before any task starts and in each task before its brokers do.
The backlog per tube decides where the brokers go (``drain.plan_brokers``), and while the
tasks run the driver prints each tube's progress from ``stats-tube`` (the results
themselves reach the driver only when a task ends).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cmdstalk_py.client.errors import ConnectionLost, NotFound
from cmdstalk_py.client.pipeline import Client


class DrainError(Exception):
    """The drain cannot run: the server is unreachable, or --cwd is missing somewhere."""


def wait_for_server(address: str, timeout: float, where: str = "") -> None:
    """Return once ``address`` accepts a connection; DrainError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Client.connect(address, timeout=min(10.0, max(timeout, 0.1))):
                return
        except (ConnectionLost, OSError) as exc:
            if time.monotonic() >= deadline:
                raise DrainError(
                    f"cannot reach beanstalkd at {address}{where} for {timeout:.0f}s "
                    f"(--connect-timeout): {exc}"
                ) from exc
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def tube_stats(address: str, tubes: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """``stats-tube`` of each tube as integers (a tube the server does not know: zeros)."""
    out: dict[str, dict[str, int]] = {}
    with Client.connect(address, timeout=10) as conn:
        for tube in tubes:
            try:
                raw = conn.stats_tube(tube)
            except NotFound:
                out[tube] = {}
                continue
            out[tube] = {k: v for k, v in raw.items() if isinstance(v, int)}
    return out


def backlog(address: str, tubes: tuple[str, ...]) -> dict[str, int]:
    """Jobs waiting per tube now (ready + delayed)."""
    stats = tube_stats(address, tubes)
    return {
        t: s.get("current-jobs-ready", 0) + s.get("current-jobs-delayed", 0)
        for t, s in stats.items()
    }


class Watch:
    """A driver thread printing each tube's progress while the drain's tasks run."""

    def __init__(
        self,
        address: str,
        tubes: tuple[str, ...],
        say: Callable[[str], None],
        interval: float = 2.0,
    ) -> None:
        self.address = address
        self.tubes = tubes
        self.say = say
        self.interval = interval
        self._stop = threading.Event()
        self._start = tube_stats(address, tubes)
        self._thread = threading.Thread(target=self._run, name="drain-watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def line(self, now: dict[str, dict[str, int]]) -> str:
        """One progress line: per tube, jobs deleted and buried since the start, and what
        is still waiting or running."""
        parts = []
        for tube in self.tubes:
            s, s0 = now.get(tube, {}), self._start.get(tube, {})
            done = s.get("cmd-delete", 0) - s0.get("cmd-delete", 0)
            buried = s.get("current-jobs-buried", 0) - s0.get("current-jobs-buried", 0)
            parts.append(
                f"{tube}: {done} done, {max(0, buried)} failed (buried), "
                f"{s.get('current-jobs-ready', 0)} ready, "
                f"{s.get('current-jobs-reserved', 0)} running"
            )
        return "; ".join(parts)

    def _run(self) -> None:
        last = ""
        while not self._stop.wait(self.interval):
            try:
                text = self.line(tube_stats(self.address, self.tubes))
            except (ConnectionLost, OSError) as exc:
                text = f"server unreachable: {exc}"
            if text != last:
                self.say(text)
                last = text
