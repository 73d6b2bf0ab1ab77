"""The server's event loop: one epoll set, one timer heap, a queue of callbacks.

Why not asyncio: the server never used its transports, protocols or coroutines, only its
loop, and that loop costs a request/response client dearly. Driving connections from an
epoll set nested inside asyncio's took two ``epoll_wait`` calls per request plus asyncio's
own bookkeeping (``_run_once``, handles, contexts); this loop takes one call and a dict
lookup, and importing it costs next to nothing, where importing asyncio was a noticeable
part of the server's start-up (figures: benchmarks/README.md). Like beanstalkd's
``srvserve``: the time to the next deadline is the poll timeout.

One thread owns a loop. ``call_soon_threadsafe`` and signals wake it through a
non-blocking pipe watched by the same epoll set; signal handlers only queue a callback.
"""

from __future__ import annotations

import heapq
import os
import select
import sys
from time import monotonic

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import signal
    from collections import deque
    from collections.abc import Callable
    from typing import Any

    #: Handler of one watched descriptor: called with the epoll event mask.
    IOHandler = Callable[[int], None]
else:
    # The C modules under collections and signal: their Python layers cost start-up time.
    import _signal as signal
    from _collections import deque

__all__ = ["Loop", "Timer"]

#: Longest poll: epoll takes milliseconds in a C int, and a job may be delayed 2**32 s.
MAX_POLL = 24 * 3600.0


class Timer:
    """A callback due at ``when`` (loop time); ``cancel`` stops it from running."""

    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run (a no-op once it ran)."""
        self.cancelled = True

    def __lt__(self, other: Timer) -> bool:
        return self.when < other.when


class Loop:
    """A single-threaded epoll event loop with timers and thread-safe wake-ups."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        #: Handler by watched descriptor (public for the hot path of ``net.Server``).
        self.handlers: dict[int, IOHandler] = {}
        #: Called after each batch of descriptor events, before timers and callbacks.
        self.after_events: Callable[[], None] | None = None
        self._timers: list[Timer] = []
        self._ready: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        # Wakes the poll from other threads (call_soon_threadsafe) and on signals.
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.epoll.register(self._wake_r, select.EPOLLIN)
        self.handlers[self._wake_r] = self._drain_wake
        self._signals: dict[int, Any] = {}
        self._old_wakeup_fd: int | None = None
        self._stopping = False
        self.closed = False

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
        timer = Timer(when, callback, args)
        heapq.heappush(self._timers, timer)
        return timer

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
        """Run until ``stop``."""
        self._stopping = False
        while not self._stopping:
            self.run_once()

    def run_once(self, block: bool = True) -> None:
        """One iteration: poll (up to the next deadline), events, due timers, callbacks."""
        timers = self._timers
        ready = self._ready
        if ready or not block:
            timeout = 0.0
        elif timers:
            while timers and timers[0].cancelled:
                heapq.heappop(timers)
            timeout = (
                min(MAX_POLL, max(0.0, timers[0].when - monotonic())) if timers else -1.0
            )
        else:
            timeout = -1.0
        events = self.epoll.poll(timeout)
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
                _report()
            after_events = self.after_events
            if after_events is not None:
                try:
                    after_events()
                except Exception:  # as in _guard, without its frame on every iteration
                    _report()
        if timers:
            now = monotonic()
            while timers and timers[0].when <= now:
                timer = heapq.heappop(timers)
                if not timer.cancelled:
                    self._guard(timer.callback, timer.args)
        # Only what was queued before this point: callbacks queued by callbacks wait for
        # the next iteration (whose poll does not block), so input is never starved.
        for _ in range(len(ready)):
            callback, args = ready.popleft()
            self._guard(callback, args)

    def _guard(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:  # one failing callback must not end the server
            _report()

    def close(self) -> None:
        """Release the epoll set and the wake pipe; restore signal handlers (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._restore_signals()
        self.epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.handlers.clear()
        self._timers.clear()
        self._ready.clear()


def _report() -> None:
    import traceback  # only on the error path: keeps start-up lean

    sys.stderr.write("cmdstalk-server: error in the event loop:\n")
    traceback.print_exc()
