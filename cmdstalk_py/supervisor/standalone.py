"""Brokers outside a supervisor: on a loop of the calling thread's own (tests, Spark tasks).

``serve_standalone`` runs brokers' ``serve`` together on a new event loop until each ends
by itself or ``stop`` is set; ``kill_now`` (if given) makes their running commands be
killed at once. Both are ``threading.Event``s, set from any thread or a signal handler:
one small bridge thread hands them to the loop as its switches (the only thread here).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import get_running_loop

if TYPE_CHECKING:
    from cmdstalk_py.supervisor.broker import Broker

#: How often the bridge looks at the events (seconds): how late a stop may act.
BRIDGE_POLL = 0.05


def serve_standalone(
    brokers: Sequence[Broker],
    stop: threading.Event | None = None,
    max_jobs: int | Sequence[int | None] | None = None,
    idle_timeout: float | None = None,
    kill_now: threading.Event | None = None,
) -> list[int]:
    """Each broker's job count once all have ended. ``max_jobs``: one bound for all, or
    one per broker."""
    return tools.run(_serve(brokers, stop, max_jobs, idle_timeout, kill_now))


async def _serve(
    brokers: Sequence[Broker],
    stop: threading.Event | None,
    max_jobs: int | Sequence[int | None] | None,
    idle_timeout: float | None,
    kill_now: threading.Event | None,
) -> list[int]:
    loop = get_running_loop()
    over = threading.Event()

    def set_stop() -> None:
        for broker in brokers:
            broker.switches.stop.set()

    def set_kill_now() -> None:
        for broker in brokers:
            broker.switches.kill_now.set()

    def bridge() -> None:
        stopped = killed = False
        while not over.wait(BRIDGE_POLL):
            if stop is not None and stop.is_set() and not stopped:
                stopped = True
                loop.call_soon_threadsafe(set_stop)
            if kill_now is not None and kill_now.is_set() and not killed:
                killed = True
                loop.call_soon_threadsafe(set_kill_now)

    thread = None
    if stop is not None or kill_now is not None:
        thread = threading.Thread(target=bridge, name="cmdstalk-standalone-bridge", daemon=True)
        thread.start()
    try:
        limits = list(max_jobs) if isinstance(max_jobs, Sequence) else [max_jobs] * len(brokers)
        runs = [
            # Named for the logs of a Spark task (``spark/drain.py``): server, tube, slot.
            loop.create_task(
                b.serve(n, idle_timeout), name=f"broker-{b.connection.address}/{b.where}"
            )
            for b, n in zip(brokers, limits, strict=True)
        ]
        return list(await tools.gather(*runs))
    finally:
        over.set()
        if thread is not None:
            thread.join()
