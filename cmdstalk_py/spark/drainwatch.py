"""The drain seen through the server: is it reachable, how big is each tube, how far along.

A batch drain must not retry an unreachable server forever (the supervisor's brokers do,
which is right for a daemon): :func:`wait_for_servers` gives up after a bounded time with a
clear error naming the servers it could not reach, on the driver before any task starts and
in each task before its brokers do. The backlog per tube and server decides where the
brokers go (``drainplan``), and while the tasks run the driver prints each tube's progress
on each server from ``stats-tube``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from cmdstalk_py.client.errors import ConnectionLost, NotFound
from cmdstalk_py.client.pipeline import Client


class DrainError(Exception):
    """The drain cannot run: the server is unreachable, or --cwd is missing somewhere."""


def wait_for_servers(
    servers: Sequence[str],
    timeout: float,
    where: str = "",
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once every server accepts a connection; DrainError naming those that did not
    within ``timeout`` s (one deadline for all: a list of servers waits no longer than one;
    ``clock`` and ``sleep`` are the time the deadline is kept in)."""
    deadline = clock() + timeout
    waiting = list(servers)
    while True:
        errors: dict[str, BaseException] = {}
        for address in waiting:
            # Each attempt within what is left of the deadline (at least a moment, so a
            # server that answers at once is never refused for want of time).
            attempt = max(0.1, min(10.0, deadline - clock()))
            try:
                with Client.connect(address, timeout=attempt):
                    pass
            except (ConnectionLost, OSError) as exc:
                errors[address] = exc
        waiting = list(errors)
        if not waiting:
            return
        if clock() >= deadline:
            names = ", ".join(waiting)
            raise DrainError(
                f"cannot reach beanstalkd at {names}{where} for {timeout:.0f}s "
                f"(--connect-timeout): {errors[waiting[0]]}"
            ) from errors[waiting[0]]
        sleep(min(1.0, max(0.0, deadline - clock())))


def wait_for_server(address: str, timeout: float, where: str = "") -> None:
    """Return once ``address`` accepts a connection; DrainError after ``timeout`` s."""
    wait_for_servers((address,), timeout, where)


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
    """A driver thread printing each tube's progress (on each server) while the drain's
    tasks run."""

    def __init__(
        self,
        servers: Sequence[str],
        tubes: tuple[str, ...],
        say: Callable[[str], None],
        interval: float = 2.0,
    ) -> None:
        self.servers = tuple(servers)
        self.tubes = tubes
        self.say = say
        self.interval = interval
        self._stop = threading.Event()
        self._start = {s: tube_stats(s, tubes) for s in self.servers}
        self._thread = threading.Thread(target=self._run, name="drain-watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def line(self, now: dict[str, dict[str, int]], server: str | None = None) -> str:
        """One progress line: per tube, jobs deleted and buried since the start, and what
        is still waiting or running (on ``server``, named in front of each tube when the
        drain has several)."""
        server = server or self.servers[0]
        start = self._start.get(server, {})
        prefix = f"{server} " if len(self.servers) > 1 else ""
        parts = []
        for tube in self.tubes:
            s, s0 = now.get(tube, {}), start.get(tube, {})
            done = s.get("cmd-delete", 0) - s0.get("cmd-delete", 0)
            buried = s.get("current-jobs-buried", 0) - s0.get("current-jobs-buried", 0)
            parts.append(
                f"{prefix}{tube}: {done} done, {max(0, buried)} failed (buried), "
                f"{s.get('current-jobs-ready', 0)} ready, "
                f"{s.get('current-jobs-reserved', 0)} running"
            )
        return "; ".join(parts)

    def _run(self) -> None:
        last = ""
        while not self._stop.wait(self.interval):
            parts = []
            for server in self.servers:
                try:
                    parts.append(self.line(tube_stats(server, self.tubes), server))
                except (ConnectionLost, OSError) as exc:
                    parts.append(f"server {server} unreachable: {exc}")
            text = "; ".join(parts)
            if text != last:
                self.say(text)
                last = text
