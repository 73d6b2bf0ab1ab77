"""Futures and tasks: coroutines driven by ``core.Loop``, awaited as asyncio's are.

A ``Future`` is a result to come; awaiting one that is not done yields it to the ``Task``
running the coroutine, which asks to be woken when it is done. A ``Task`` steps its
coroutine with ``send``/``throw``. ``cancel`` throws ``CancelledError`` in at the await
where the task waits, and ``cancelling``/``uncancel`` count the requests, so ``timeout``
(``tools``) can tell its own cancellation from somebody else's, as asyncio's does.

The names and meanings follow asyncio's (``done``, ``result``, ``add_done_callback``…) so
code reads the same; what is left out is what the supervisor never needs (contexts,
``__del__`` warnings, eager tasks). Done callbacks run in a later iteration of the loop, as
asyncio's do: a callback never runs inside ``set_result``'s caller.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cmdstalk_py.loop.core import get_running_loop, set_running_loop

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Generator
    from concurrent.futures import Future as ConcurrentFuture

    from cmdstalk_py.loop.core import Loop

T = TypeVar("T")

__all__ = [
    "CancelledError",
    "Future",
    "InvalidStateError",
    "Task",
    "current_task",
    "ensure_future",
    "get_running_loop",
    "set_running_loop",
    "wrap_concurrent",
]


class CancelledError(BaseException):
    """The task was cancelled (a ``BaseException``, as asyncio's: ``except Exception``
    must not swallow it)."""


class InvalidStateError(Exception):
    """A result asked of a pending future, or set on a done one."""


_PENDING, _FINISHED, _CANCELLED = 0, 1, 2


class Future(Generic[T]):
    """A result (or exception) to come, on one loop."""

    __slots__ = ("__weakref__", "_callbacks", "_exception", "_loop", "_result", "_state")

    def __init__(self, loop: Loop) -> None:
        self._loop = loop
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Future[T]], object]] = []

    def get_loop(self) -> Loop:
        return self._loop

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> T:
        """The result; raises the exception set, ``CancelledError`` or
        ``InvalidStateError`` (still pending)."""
        if self._state == _FINISHED:
            if self._exception is not None:
                raise self._exception
            result: T = self._result
            return result
        if self._state == _CANCELLED:
            raise CancelledError()
        raise InvalidStateError("the result is not set yet")

    def exception(self) -> BaseException | None:
        """The exception set (None: a result); raises as ``result`` when there is none."""
        if self._state == _FINISHED:
            return self._exception
        if self._state == _CANCELLED:
            raise CancelledError()
        raise InvalidStateError("the result is not set yet")

    def set_result(self, result: T) -> None:
        if self._state != _PENDING:
            raise InvalidStateError("the future is already done")
        self._result = result
        self._state = _FINISHED
        self._schedule_callbacks()

    def set_exception(self, exception: BaseException | type[BaseException]) -> None:
        if self._state != _PENDING:
            raise InvalidStateError("the future is already done")
        if isinstance(exception, type):
            exception = exception()
        if isinstance(exception, StopIteration):
            # Raised through a coroutine's frame it would become a RuntimeError anyway.
            raise TypeError("StopIteration cannot be set on a future")
        self._exception = exception
        self._state = _FINISHED
        self._schedule_callbacks()

    def cancel(self, msg: object = None) -> bool:
        """Cancel a pending future (False: it was done)."""
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._schedule_callbacks()
        return True

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        """Call ``fn(self)`` in a later iteration once done (at once scheduled if it is)."""
        if self._state != _PENDING:
            self._loop.call_soon(fn, self)
        else:
            self._callbacks.append(fn)

    def remove_done_callback(self, fn: Callable[[Future[T]], object]) -> int:
        """Forget every registration of ``fn``; how many there were."""
        kept = [cb for cb in self._callbacks if cb != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def _schedule_callbacks(self) -> None:
        callbacks = self._callbacks
        if callbacks:
            self._callbacks = []
            call_soon = self._loop.call_soon
            for fn in callbacks:
                call_soon(fn, self)

    def __await__(self) -> Generator[Any, None, T]:
        if self._state == _PENDING:
            yield self  # to the task stepping this coroutine: it waits for us
            if self._state == _PENDING:
                raise RuntimeError("await was not used with a task of this loop")
        return self.result()

    __iter__ = __await__

    def __repr__(self) -> str:
        state = ("pending", "finished", "cancelled")[self._state]
        return f"<{type(self).__name__} {state}>"


class Task(Future[T]):
    """A coroutine run by the loop, one step per wake-up; a future of its return value."""

    __slots__ = ("_cancel_requests", "_coro", "_must_cancel", "_name", "_unfinished", "_waiter")

    def __init__(
        self, coro: Coroutine[Any, Any, T], loop: Loop, name: str | None = None
    ) -> None:
        super().__init__(loop)
        self._coro = coro
        self._name = name
        self._waiter: Future[Any] | None = None
        self._must_cancel = False
        self._cancel_requests = 0
        self._unfinished = unfinished = loop.unfinished
        if unfinished is not None:
            unfinished.add(self)
        loop.call_soon(self._step, None)

    def get_name(self) -> str:
        return self._name if self._name is not None else f"Task-{id(self):x}"

    def get_coro(self) -> Coroutine[Any, Any, T]:
        return self._coro

    def cancel(self, msg: object = None) -> bool:
        """Ask the task to stop: ``CancelledError`` is raised at its await (False: it is
        done already)."""
        if self._state != _PENDING:
            return False
        self._cancel_requests += 1
        waiter = self._waiter
        if waiter is not None and waiter.cancel():
            return True  # its wake-up throws CancelledError in (Future.__await__)
        self._must_cancel = True  # not waiting, or its waiter just finished: at the step
        return True

    def cancelling(self) -> int:
        """Cancellation requests not yet taken back by ``uncancel``."""
        return self._cancel_requests

    def uncancel(self) -> int:
        """Take one cancellation request back (``timeout`` that turned its own into a
        ``TimeoutError``); how many are left."""
        if self._cancel_requests > 0:
            self._cancel_requests -= 1
        return self._cancel_requests

    def _schedule_callbacks(self) -> None:
        if self._unfinished is not None:  # every way a task ends comes here
            self._unfinished.discard(self)
        Future._schedule_callbacks(self)

    def _wakeup(self, _waiter: Future[Any]) -> None:
        self._step(None)

    def _step(self, exc: BaseException | None) -> None:
        if self._state != _PENDING:
            return
        if self._must_cancel:
            self._must_cancel = False
            if not isinstance(exc, CancelledError):
                exc = CancelledError()
        self._waiter = None
        loop = self._loop
        previous = loop.current
        loop.current = self
        try:
            yielded = self._coro.send(None) if exc is None else self._coro.throw(exc)
        except StopIteration as stop:
            if self._must_cancel:  # cancelled during its last step: it is cancelled
                self._must_cancel = False
                Future.cancel(self)
            else:
                Future.set_result(self, stop.value)
        except CancelledError:
            Future.cancel(self)
        except (KeyboardInterrupt, SystemExit) as e:
            Future.set_exception(self, e)
            raise
        except BaseException as e:
            Future.set_exception(self, e)
        else:
            if yielded is None:  # a bare yield (``sleep(0)``): step again next iteration
                loop.call_soon(self._step, None)
            elif isinstance(yielded, Future):
                if yielded._loop is not loop:
                    loop.call_soon(self._step, RuntimeError(f"{yielded!r} is of another loop"))
                else:
                    self._waiter = yielded
                    if yielded._state == _PENDING:
                        yielded._callbacks.append(self._wakeup)
                    else:
                        loop.call_soon(self._wakeup, yielded)
                    if self._must_cancel and yielded.cancel():
                        self._must_cancel = False
            else:
                loop.call_soon(self._step, RuntimeError(f"a task cannot wait for {yielded!r}"))
        finally:
            loop.current = previous

    def __repr__(self) -> str:
        state = ("pending", "finished", "cancelled")[self._state]
        return f"<Task {self.get_name()} {state}>"


def current_task() -> Task[Any] | None:
    """The task whose step is running (None outside of one, or with no running loop)."""
    try:
        return get_running_loop().current
    except RuntimeError:
        return None


def ensure_future(awaitable: Awaitable[T], loop: Loop | None = None) -> Future[T]:
    """A future as it is; a coroutine as a new task (on ``loop``, or the running one)."""
    if isinstance(awaitable, Future):
        return awaitable
    if loop is None:
        loop = get_running_loop()
    return Task(awaitable, loop)  # type: ignore[arg-type]


def wrap_concurrent(done_later: ConcurrentFuture[T], loop: Loop) -> Future[T]:
    """A future of ``loop`` that takes the outcome of a ``concurrent.futures`` one (set
    in another thread). Cancelling ours cancels a call not started yet, as asyncio's
    executor futures do (a kill given up must not send the signals queued behind it); a
    call already running runs on, and nobody reads its outcome."""
    return _FromThread(loop, done_later)


class _FromThread(Future[T]):
    __slots__ = ("_source",)

    def __init__(self, loop: Loop, source: ConcurrentFuture[T]) -> None:
        super().__init__(loop)
        self._source = source
        source.add_done_callback(self._arrived)

    def cancel(self, msg: object = None) -> bool:
        self._source.cancel()
        return super().cancel(msg)

    def _arrived(self, source: ConcurrentFuture[T]) -> None:
        """In the thread that ended the call (or this one, for a call cancelled first)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._copy, source)

    def _copy(self, source: ConcurrentFuture[T]) -> None:
        if self.done():
            return
        if source.cancelled():
            super().cancel()
            return
        error = source.exception()
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(source.result())
