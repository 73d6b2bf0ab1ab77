"""The event loop's time: how long it is held, and sleeps that a poke cuts short.

How long the loop is held is the time between two polls of its selector.

Everything the loop runs between two ``select`` calls (the callbacks and coroutine steps
of one iteration) holds every other worker, kill point and job start on it. ``new_loop``
makes the supervisor's loop with a selector that times that span; ``TimedSelector.take``
hands the longest since the last look (``lifecycle`` reports it as the loop's lag and warns
past 100 ms). Two clock readings an iteration; no debug mode.

``Alarm`` is the periodic sleep of the supervisor's own tasks (the main coroutine,
discovery): a timer and a future, where ``asyncio.timeout`` around an ``Event.wait`` would
cancel the task, and raise and catch a ``CancelledError`` through it, at every quiet tick.
"""

from __future__ import annotations

import asyncio
import selectors
import time
import weakref


class TimedSelector(selectors.DefaultSelector):
    """The platform's selector, timing what the loop does between its polls."""

    def __init__(self) -> None:
        super().__init__()
        self._returned: float | None = None
        self._longest = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self._returned is not None:
            held = time.monotonic() - self._returned
            if held > self._longest:
                self._longest = held
        events = super().select(timeout)
        self._returned = time.monotonic()
        return events

    def take(self) -> float:
        """The longest the loop was held since the last call, seconds."""
        longest, self._longest = self._longest, 0.0
        return longest


_SELECTORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimedSelector] = (
    weakref.WeakKeyDictionary()
)


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for the supervisor, its selector timed (``selector_of``)."""
    selector = TimedSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _SELECTORS[loop] = selector
    return loop


def selector_of(loop: asyncio.AbstractEventLoop) -> TimedSelector | None:
    """The timing selector of a loop ``new_loop`` made (None for another loop)."""
    return _SELECTORS.get(loop)


class Alarm:
    """A sleep of one task that ``poke()`` cuts short (on the loop's thread; from another
    thread, through ``call_soon_threadsafe``). A poke while nobody sleeps ends the next
    sleep at once: it is never lost."""

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._poked = False

    def poke(self) -> None:
        self._poked = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep(self, seconds: float) -> None:
        """Until ``seconds`` have passed or ``poke()`` is called, whichever comes first."""
        if not self._poked:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(seconds, _ring, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        self._poked = False


def _ring(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
