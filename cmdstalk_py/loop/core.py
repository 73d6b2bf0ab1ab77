"""The event loop of the server and the supervisor: one epoll set, one timer heap, a queue
of callbacks. Coroutines run on it as ``futures.Task``s (``cmdstalk_py.loop``).

Why not asyncio: the server never used its transports, protocols or coroutines, only its
loop, and that loop costs a request/response client dearly. Driving connections from an
epoll set nested inside asyncio's took two ``epoll_wait`` calls per request plus asyncio's
own bookkeeping (``_run_once``, handles, contexts); this loop takes one call and a dict
lookup, and importing it costs next to nothing, where importing asyncio was a noticeable
part of the server's start-up (figures: benchmarks/README.md). Like beanstalkd's
``srvserve``: the time to the next deadline is the poll timeout.

The supervisor's workers are coroutines, and a job wakes the loop many times (a reply, a
pipe's end, a pidfd): on asyncio each wake-up costs a selector object, handles, contexts, a
heap check; here a dict lookup and a call (figures: docs/architecture.md).

One thread owns a loop. ``call_soon_threadsafe`` and signals wake it through a
non-blocking pipe watched by the same epoll set; signal handlers only queue a callback.
The loop times what it does between two polls (``longest_busy``): the supervisor reports
the longest such span as its loop lag.
"""

from __future__ import annotations

import _thread
import heapq
import os
import select
import sys
from time import monotonic

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import signal
    from collections import deque
    from collections.abc import Awaitable, Callable, Coroutine
    from typing import Any, TypeVar

    from cmdstalk_py.loop import futures

    T = TypeVar("T")

    #: Handler of one watched descriptor: called with the epoll event mask.
    IOHandler = Callable[[int], None]
else:
    # The C modules under collections and signal: their Python layers cost start-up time.
    import _signal as signal
    from _collections import deque

__all__ = ["Loop", "Timer", "get_running_loop", "report_to_stderr", "set_running_loop"]

#: Cancelled timers the heap may hold before a rebuild is considered (see _timer_cancelled).
CANCELLED_REBUILD = 64

#: Longest poll: epoll takes milliseconds in a C int, and a job may be delayed 2**32 s.
MAX_POLL = 24 * 3600.0


class Timer:
    """A callback due at ``when`` (loop time); ``cancel`` stops it from running."""

    __slots__ = ("args", "callback", "cancelled", "loop", "when")

    def __init__(
        self, when: float, callback: Callable[..., Any], args: tuple[Any, ...], loop: Loop
    ) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False
        self.loop: Loop | None = loop  # None once out of the loop's heap

    def cancel(self) -> None:
        """Do not run (a no-op once it ran)."""
        if not self.cancelled:
            self.cancelled = True
            if self.loop is not None:
                self.loop._timer_cancelled()

    def __lt__(self, other: Timer) -> bool:
        return self.when < other.when


class Loop:
    """A single-threaded epoll event loop with timers and thread-safe wake-ups."""

    def __init__(self, report: Callable[[], None] | None = None) -> None:
        #: Called (in an ``except`` block) when a handler or callback raised: the loop
        #: goes on. The server prints the traceback; the supervisor logs it.
        self.report = report or report_to_stderr
        self.epoll = select.epoll()
        #: Handler by watched descriptor (public for the hot path of ``net.Server``).
        self.handlers: dict[int, IOHandler] = {}
        #: Called after each batch of descriptor events, before timers and callbacks.
        self.after_events: Callable[[], None] | None = None
        self._timers: list[Timer] = []
        self._cancelled_timers = 0  # cancelled timers still in the heap
        self._ready: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        # Wakes the poll from other threads (call_soon_threadsafe) and on signals.
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.epoll.register(self._wake_r, select.EPOLLIN)
        self.handlers[self._wake_r] = self._drain_wake
        self._signals: dict[int, Any] = {}
        self._old_wakeup_fd: int | None = None
        self._stopping = False
        self._running = False
        self.closed = False
        #: The longest time, in seconds, the loop spent between two polls since this was
        #: last reset to 0 (by whoever reports it).
        self.longest_busy = 0.0
        #: When the last poll returned (loop time): what runs now has held the loop since.
        self.polled_at = monotonic()
        #: The task whose step is running (``futures.current_task``).
        self.current: futures.Task[Any] | None = None
        #: When a set (``tools.run`` makes one): the tasks started since and not done,
        #: kept up to date by the tasks. None by default: a loop dropped with a task
        #: pending must not keep it, and what its coroutine holds, alive.
        self.unfinished: set[futures.Task[Any]] | None = None
        self._executor: Any = None

    # ---------------------------------------------------------------- clock and callbacks

    def time(self) -> float:
        """The loop's clock: ``time.monotonic`` (the engine's and the journal's too)."""
        return monotonic()

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` in the next iteration (after this one's events)."""
        self._ready.append((callback, args))

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any) -> None:
        """``call_soon`` from another thread (or a signal handler): also wakes the poll.

        Raises RuntimeError once the loop is closed (the callback would never run).
        """
        if self.closed:
            raise RuntimeError("the event loop is closed")
        self._ready.append((callback, args))  # deque.append is atomic
        self._wake()

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` once the loop time reaches ``when``."""
        timer = Timer(when, callback, args, self)
        heapq.heappush(self._timers, timer)
        return timer

    def _timer_cancelled(self) -> None:
        # A cancelled timer stays in the heap until it comes to the top; a worker that
        # sets and cancels a watchdog per request would leave one per request for the
        # whole delay. Past half the heap, and a floor, rebuild it without them.
        self._cancelled_timers += 1
        timers = self._timers
        many = self._cancelled_timers
        if many > CANCELLED_REBUILD and many * 2 > len(timers):
            kept = []
            for timer in timers:
                if timer.cancelled:
                    timer.loop = None
                else:
                    kept.append(timer)
            heapq.heapify(kept)
            self._timers = kept
            self._cancelled_timers = 0

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` ``delay`` seconds from now."""
        return self.call_at(self.time() + delay, callback, *args)

    # ---------------------------------------------------------------- descriptors

    def watch(self, fd: int, mask: int, handler: IOHandler) -> None:
        """Call ``handler(events)`` when ``fd`` has any of the epoll events in ``mask``."""
        self.epoll.register(fd, mask)
        self.handlers[fd] = handler

    def modify(self, fd: int, mask: int) -> None:
        """Change the events watched on ``fd``."""
        self.epoll.modify(fd, mask)

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed). Unknown descriptors are ignored."""
        if self.handlers.pop(fd, None) is not None:
            try:  # noqa: SIM105 (contextlib is kept off the serving path: start-up time)
                self.epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def add_reader(self, fd: int, callback: Callable[..., Any], *args: Any) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is readable."""
        self.watch(fd, select.EPOLLIN, lambda _events: callback(*args))

    def remove_reader(self, fd: int) -> None:
        """Stop watching ``fd`` for input."""
        self.unwatch(fd)

    def add_writer(self, fd: int, callback: Callable[..., Any], *args: Any) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is writable (not also read: one
        handler per descriptor)."""
        self.watch(fd, select.EPOLLOUT, lambda _events: callback(*args))

    def remove_writer(self, fd: int) -> None:
        """Stop watching ``fd`` for output."""
        self.unwatch(fd)

    # ---------------------------------------------------------------- coroutines, threads

    # ``futures`` is imported where first needed: the server runs no coroutines, and
    # futures imports typing (start-up time).

    def create_future(self) -> futures.Future[Any]:
        """A future on this loop."""
        from cmdstalk_py.loop.futures import Future

        return Future(self)

    def create_task(
        self, coro: Coroutine[Any, Any, T], name: str | None = None
    ) -> futures.Task[T]:
        """Run ``coro`` as a task: its first step is in the next iteration."""
        from cmdstalk_py.loop.futures import Task

        return Task(coro, self, name)

    def run_in_executor(
        self, executor: Any, fn: Callable[..., T], *args: Any
    ) -> futures.Future[T]:
        """``fn(*args)`` in ``executor`` (a ``concurrent.futures`` executor; None: the
        loop's own pool, made on first use) as a future of this loop."""
        if executor is None:
            executor = self._executor
            if executor is None:
                from concurrent.futures import ThreadPoolExecutor  # only when first needed

                executor = self._executor = ThreadPoolExecutor(
                    max_workers=4, thread_name_prefix="loop-executor"
                )
        from cmdstalk_py.loop.futures import wrap_concurrent

        return wrap_concurrent(executor.submit(fn, *args), self)

    def run_until_complete(self, awaitable: Awaitable[T]) -> T:
        """Run until ``awaitable`` (a coroutine or future of this loop) is done; its
        result."""
        from cmdstalk_py.loop.futures import ensure_future

        future = ensure_future(awaitable, self)
        future.add_done_callback(lambda _f: self.stop())
        self.run_forever()
        if not future.done():
            raise RuntimeError("the loop stopped before the future was done")
        return future.result()

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self.closed

    # ---------------------------------------------------------------- signals

    def add_signal_handler(self, sig: int, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` on the loop after ``sig`` arrives (main thread only)."""
        if self._old_wakeup_fd is None:
            # The C-level handler writes the signal number here, so a poll in progress
            # returns even though the Python handler only queues the callback.
            self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

        def handler(_signum: int, _frame: Any) -> None:
            self._ready.append((callback, ()))

        self._signals[sig] = signal.signal(sig, handler)

    def remove_signal_handler(self, sig: int) -> bool:
        """Give ``sig`` back its handler from before ``add_signal_handler``."""
        previous = self._signals.pop(sig, None)
        if previous is None:
            return False
        signal.signal(sig, previous)
        return True

    def _restore_signals(self) -> None:
        for sig, previous in self._signals.items():
            signal.signal(sig, previous)
        self._signals.clear()
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._old_wakeup_fd = None

    def _wake(self) -> None:
        # A full pipe means a wake-up is pending anyway; a closed one, a closed loop.
        try:  # noqa: SIM105 (contextlib is kept off the serving path: start-up time)
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def _drain_wake(self, _events: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # ---------------------------------------------------------------- running

    def stop(self) -> None:
        """Return from ``run_forever`` at the end of the current iteration."""
        self._stopping = True

    def run_forever(self) -> None:
        """Run until ``stop``; meanwhile this is the thread's running loop."""
        if self._running:
            raise RuntimeError("the loop is already running")
        previous = set_running_loop(self)
        self._running = True
        self._stopping = False
        try:
            while not self._stopping:
                self.run_once()
        finally:
            self._running = False
            set_running_loop(previous)

    def run_once(self, block: bool = True) -> None:
        """One iteration: poll (up to the next deadline), events, due timers, callbacks."""
        timers = self._timers
        ready = self._ready
        if ready or not block:
            timeout = 0.0
        elif timers:
            while timers and timers[0].cancelled:
                heapq.heappop(timers).loop = None
                self._cancelled_timers -= 1
            timeout = (
                min(MAX_POLL, max(0.0, timers[0].when - monotonic())) if timers else -1.0
            )
        else:
            timeout = -1.0
        events = self.epoll.poll(timeout)
        self.polled_at = began = monotonic()
        if events:
            handlers = self.handlers
            try:
                for fd, mask in events:
                    handler = handlers.get(fd)
                    if handler is not None:  # None: closed by an earlier event of the batch
                        handler(mask)
            except Exception:
                # The events not handled yet are reported again by the next poll (level
                # triggered); one failing handler must not end the server.
                self.report()
            after_events = self.after_events
            if after_events is not None:
                try:
                    after_events()
                except Exception:  # as in _guard, without its frame on every iteration
                    self.report()
        timers = self._timers  # a callback's cancel may have rebuilt the heap
        if timers:
            now = monotonic()
            while timers and timers[0].when <= now:
                timer = heapq.heappop(timers)
                timer.loop = None
                if timer.cancelled:
                    self._cancelled_timers -= 1
                else:
                    self._guard(timer.callback, timer.args)
                timers = self._timers
        # Only what was queued before this point: callbacks queued by callbacks wait for
        # the next iteration (whose poll does not block), so input is never starved.
        for _ in range(len(ready)):
            callback, args = ready.popleft()
            self._guard(callback, args)
        busy = monotonic() - began
        if busy > self.longest_busy:
            self.longest_busy = busy

    def _guard(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:  # one failing callback must not end the server
            self.report()

    def __del__(self) -> None:
        wake_w = getattr(self, "_wake_w", None)  # None: __init__ failed before the pipe
        if wake_w is not None:
            _close_quietly(wake_w)

    def close(self) -> None:
        """Release the epoll set and the wake pipe; restore signal handlers (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._restore_signals()
        self.epoll.close()
        os.close(self._wake_r)
        # The write end stays open until the loop is dropped: a thread that saw the loop
        # open a moment ago may still write its wake-up byte, which must go to this pipe
        # (whose reader is gone: EPIPE, ignored), not to a descriptor reusing the number.
        self.handlers.clear()
        self._timers.clear()
        self._ready.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


# The running loop of each thread (one loop per thread: the supervisor's, a Spark task's,
# the embedded server's).
_running: dict[int, Loop] = {}


def set_running_loop(loop: Loop | None) -> Loop | None:
    """Make ``loop`` this thread's running loop (None: none); the one it was."""
    ident = _thread.get_ident()
    previous = _running.get(ident)
    if loop is None:
        _running.pop(ident, None)
    else:
        _running[ident] = loop
    return previous


def get_running_loop() -> Loop:
    """The loop running in this thread (``RuntimeError`` when none is)."""
    loop = _running.get(_thread.get_ident())
    if loop is None:
        raise RuntimeError("no running event loop")
    return loop


def _close_quietly(fd: int) -> None:
    try:  # noqa: SIM105 (contextlib is kept off the serving path: start-up time)
        os.close(fd)
    except OSError:
        pass


def report_to_stderr() -> None:
    """The server's ``Loop.report``: the traceback on stderr."""
    import traceback  # only on the error path: keeps start-up lean

    sys.stderr.write("cmdstalk-server: error in the event loop:\n")
    traceback.print_exc()
