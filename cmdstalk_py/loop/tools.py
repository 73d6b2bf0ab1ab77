"""What coroutines on ``core.Loop`` wait with: sleep, timeout, wait, gather, shield, a
thread's call, ``Event`` and ``Semaphore``; and ``run``, a coroutine on a new loop.

Each means what asyncio's of the same name means (the supervisor's code reads as it did);
each is built from ``futures.Future``, the loop's timers and done callbacks.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.futures import (
    CancelledError,
    Future,
    Task,
    current_task,
    ensure_future,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
    from types import TracebackType

    from cmdstalk_py.loop.core import Timer

T = TypeVar("T")

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "Event",
    "Semaphore",
    "Timeout",
    "gather",
    "run",
    "shield",
    "sleep",
    "timeout",
    "to_thread",
    "wait",
]

FIRST_COMPLETED = "FIRST_COMPLETED"
ALL_COMPLETED = "ALL_COMPLETED"


class _Yield:
    """Awaiting it gives the loop one turn: the task steps again next iteration."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield None


def _settle(future: Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


async def sleep(delay: float, result: T = None) -> T:  # type: ignore[assignment]
    """Wait ``delay`` seconds (0 or less: one turn of the loop)."""
    if delay <= 0:
        await _Yield()
        return result
    loop = get_running_loop()
    future: Future[T] = Future(loop)
    timer = loop.call_at(loop.time() + delay, _settle, future, result)
    try:
        return await future
    finally:
        timer.cancel()


class Timeout:
    """``async with timeout(s):`` cancels the task if the block outlasts its deadline and
    raises ``TimeoutError`` in its place (asyncio's semantics: a cancellation from
    elsewhere stays a cancellation)."""

    __slots__ = ("_cancelling", "_expired", "_task", "_timer", "_when")

    def __init__(self, when: float | None) -> None:
        self._when = when
        self._task: Task[Any] | None = None
        self._timer: Timer | None = None
        self._expired = False
        self._cancelling = 0

    def when(self) -> float | None:
        return self._when

    def expired(self) -> bool:
        return self._expired

    def reschedule(self, when: float | None) -> None:
        """Move the deadline (None: none)."""
        self._when = when
        if self._task is not None and not self._expired:
            self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._when is not None and self._task is not None:
            self._timer = self._task.get_loop().call_at(self._when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._task is not None and not self._task.done():
            self._expired = True
            self._task.cancel()

    async def __aenter__(self) -> Timeout:
        task = current_task()
        if task is None:
            raise RuntimeError("timeout() is used outside of a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._arm()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._expired and self._task is not None:
            left = self._task.uncancel()
            if left <= self._cancelling and exc_type is CancelledError:
                raise TimeoutError() from exc


def timeout(delay: float | None) -> Timeout:
    """A deadline ``delay`` seconds from now for an ``async with`` block (None: none)."""
    if delay is None:
        return Timeout(None)
    return Timeout(get_running_loop().time() + delay)


async def wait(
    futures: Iterable[Future[Any]],
    timeout: float | None = None,
    return_when: str = ALL_COMPLETED,
) -> tuple[set[Future[Any]], set[Future[Any]]]:
    """Wait until all (or the first, ``FIRST_COMPLETED``) of ``futures`` are done, or
    ``timeout`` seconds; (done, pending). Nothing is cancelled."""
    pending = set(futures)
    loop = get_running_loop()
    if not pending:
        raise ValueError("wait() needs at least one future")
    left = sum(1 for f in pending if not f.done())
    if left and not (return_when == FIRST_COMPLETED and left < len(pending)):
        woken: Future[None] = Future(loop)
        counter = [left]

        def one_done(_f: Future[Any]) -> None:
            counter[0] -= 1
            if counter[0] == 0 or return_when == FIRST_COMPLETED:
                _settle(woken, None)

        for f in pending:
            f.add_done_callback(one_done)
        timer = None if timeout is None else loop.call_at(loop.time() + timeout, _settle,
                                                            woken, None)
        try:
            await woken
        finally:
            if timer is not None:
                timer.cancel()
            for f in pending:
                f.remove_done_callback(one_done)
    done = {f for f in pending if f.done()}
    return done, pending - done


async def gather(*awaitables: Awaitable[Any], return_exceptions: bool = False) -> list[Any]:
    """Every awaitable's result, in order. The first exception is raised at once (the
    others go on) unless ``return_exceptions``; cancelling the gatherer cancels them all,
    and it raises ``CancelledError`` once they have ended. Unlike asyncio's (a future whose
    ``cancel`` reaches the children at once), the children are cancelled when the gatherer
    next steps: each may take one more step first."""
    loop = get_running_loop()
    children = [ensure_future(a, loop) for a in awaitables]
    return_when = ALL_COMPLETED if return_exceptions else FIRST_COMPLETED
    pending = set(children)
    while pending:  # only the pending ones: a done one would end every wait at once
        try:
            done, pending = await wait(pending, return_when=return_when)
        except CancelledError:
            for f in children:
                f.cancel()
            # As asyncio's: the gatherer ends once its children have (their cleanup ran),
            # so whoever awaited it never outlives them.
            await wait(children)
            raise
        if not return_exceptions:
            for f in children:
                if f in done and (f.cancelled() or f.exception() is not None):
                    f.result()  # raises it (a child's cancellation: not the others')
    results: list[Any] = []
    for f in children:
        if f.cancelled():
            results.append(CancelledError())
        elif f.exception() is not None:
            results.append(f.exception())
        else:
            results.append(f.result())
    return results


def shield(awaitable: Awaitable[T]) -> Future[T]:
    """A future of ``awaitable``'s outcome that can be cancelled without cancelling it."""
    inner = ensure_future(awaitable)
    if inner.done():
        return inner
    outer: Future[T] = Future(inner.get_loop())

    def copy(done: Future[T]) -> None:
        if outer.done():
            if not done.cancelled():
                done.exception()  # retrieved: the waiter went away
            return
        if done.cancelled():
            outer.cancel()
        elif done.exception() is not None:
            outer.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            outer.set_result(done.result())

    inner.add_done_callback(copy)
    return outer


async def to_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the loop's executor threads."""
    return await get_running_loop().run_in_executor(None, fn, *args)


class Event:
    """A flag that tasks wait to see set."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[Future[None]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            waiters, self._waiters = self._waiters, []
            for f in waiters:
                _settle(f, None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        future: Future[None] = Future(get_running_loop())
        self._waiters.append(future)
        try:
            await future
        finally:
            if future in self._waiters:
                self._waiters.remove(future)
        return True


class Semaphore:
    """At most ``value`` holders at once; the others wait in arrival order."""

    __slots__ = ("_value", "_waiters")

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("a semaphore's value cannot be negative")
        self._value = value
        self._waiters: deque[Future[None]] = deque()

    def locked(self) -> bool:
        return self._value == 0

    async def acquire(self) -> bool:
        if self._value > 0 and not self._waiters:
            self._value -= 1
            return True
        future: Future[None] = Future(get_running_loop())
        self._waiters.append(future)
        try:
            await future  # release() handed its unit to us
        except CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # woken and cancelled before running: pass the unit on
            raise
        finally:
            if future in self._waiters:
                self._waiters.remove(future)
        return True

    def release(self) -> None:
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
        self._value += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


def run(coro: Coroutine[Any, Any, T], loop: Loop | None = None) -> T:
    """Run ``coro`` on ``loop`` (None: a new loop, closed after) until it returns; then the
    tasks it left running are cancelled and run to their end (asyncio.run's and its
    Runner's semantics: their cleanup runs, whatever ``coro`` did)."""
    own = loop is None
    if loop is None:
        loop = Loop()
    unfinished: set[Task[Any]] = set()
    loop.unfinished = unfinished
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            _end(loop, set(unfinished))
        finally:
            loop.unfinished = None
            if own:
                loop.close()


def _end(loop: Loop, left: set[Task[Any]]) -> None:
    if left:
        for task in left:
            task.cancel()
        loop.run_until_complete(gather(*left, return_exceptions=True))
