"""``Offload``: the dashboard's blocking work (a server's stats, an action's connection,
rendering a snapshot) run on a few daemon threads, awaited from the event loop.

The loop serving the dashboard must never block: later it is the supervisor's own, which
runs the jobs. Daemon threads, not an executor's: a server gone silent while the
supervisor stops must not hold up its exit for the rest of its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
THREADS = 4  # concurrent offloaded calls; more wait their turn in the queue

_Work = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class Offload:
    """``await offload.run(fn)``: ``fn()`` on one of ``threads`` daemon threads."""

    def __init__(self, threads: int = THREADS) -> None:
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name="cmdstalk-dashboard-work", daemon=True)
            for _ in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, loop, future))
        return await future

    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            fn, loop, future = work
            result, error = None, None
            try:
                result = fn()
            except BaseException as e:  # handed to the awaiting coroutine, which decides
                error = e
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle, future, result, error)

    def close(self) -> None:
        """Let the threads end once the work queued so far is done."""
        for _ in self._threads:
            self._queue.put(None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # its connection went away meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
