"""The event loop's time: how long it is held, and sleeps that a poke cuts short.

Everything the loop runs between two polls (the callbacks and coroutine steps of one
iteration) holds every other worker, kill point and job start on it. The loop
(``loop.core.Loop``) times that span; ``take_lag`` hands the longest since the last look
(``lifecycle`` reports it as the loop's lag and warns past 100 ms).

``give_way`` bounds a burst: a job start (the spawn is the costliest step of a job) made
when the loop has already run for ``GIVE_WAY_AFTER`` without a poll waits for the next
iterations, so five hundred jobs arriving in one reply do not hold every kill point, pipe
and timer behind five hundred spawns.

``Alarm`` is the periodic sleep of the supervisor's own tasks (the main coroutine,
discovery): a timer and a future, where ``tools.timeout`` around an ``Event.wait`` would
cancel the task, and raise and catch a ``CancelledError`` through it, at every quiet tick.
"""

from __future__ import annotations

import time

from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.futures import Future

#: Seconds of callbacks after which a job start lets the loop poll first.
GIVE_WAY_AFTER = 0.01


def take_lag(loop: Loop) -> float:
    """The longest ``loop`` was held between two polls since the last call, seconds."""
    longest, loop.longest_busy = loop.longest_busy, 0.0
    return longest


async def give_way() -> None:
    """Return once the loop has polled within ``GIVE_WAY_AFTER`` seconds: at once, usually.

    A task that finds the loop busy longer goes to the back of the line (``sleep(0)``),
    again each iteration until it finds it fresh; so each iteration runs ``GIVE_WAY_AFTER``
    seconds of job starts at most, and the timers and pipes due run in between.
    """
    loop = get_running_loop()
    while time.monotonic() - loop.polled_at > GIVE_WAY_AFTER:
        await tools.sleep(0)


class Alarm:
    """A sleep of one task that ``poke()`` cuts short (on the loop's thread; from another
    thread, through ``call_soon_threadsafe``). A poke while nobody sleeps ends the next
    sleep at once: it is never lost."""

    def __init__(self) -> None:
        self._waiter: Future[None] | None = None
        self._poked = False

    def poke(self) -> None:
        self._poked = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep(self, seconds: float) -> None:
        """Until ``seconds`` have passed or ``poke()`` is called, whichever comes first."""
        if not self._poked:
            loop = get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(seconds, _ring, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        self._poked = False


def _ring(waiter: Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
