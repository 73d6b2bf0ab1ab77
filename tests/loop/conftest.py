"""What the tests of the loop (core, futures, tools) share: a loop closed after each
test, and ``drive``, which runs a coroutine (or waits for a future) on it with a backstop,
so a wake-up that never comes fails the test instead of hanging it."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from typing import TypeVar

import pytest

from cmdstalk_py.loop.core import Loop

T = TypeVar("T")

#: Seconds a driven coroutine may take: far above what any of them needs, on a busy machine.
LIMIT = 10.0


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    try:
        yield lp
    finally:
        lp.close()


def drive(loop: Loop, awaitable: Awaitable[T], limit: float = LIMIT) -> T:
    """``loop.run_until_complete(awaitable)``, stopped after ``limit`` seconds (RuntimeError:
    the loop stopped before the future was done)."""
    backstop = loop.call_later(limit, loop.stop)
    try:
        return loop.run_until_complete(awaitable)
    finally:
        backstop.cancel()
