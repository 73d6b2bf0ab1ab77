"""``Switch``: an on/off flag owned by the event loop that acts the moment it is set.

A supervisor stops its commands with two switches (``stop``: SIGTERM, ``stop_now``:
SIGKILL) shared by every ``run_command`` on its loop. A polled flag would delay every kill
by the poll interval and wake every run for nothing; a switch instead calls the runs that
registered with it, at once, on the thread that sets it.

Not thread-safe, by design: only the loop's thread touches a switch (a signal handler or
another thread asks the loop with ``loop.call_soon_threadsafe(switch.set)``), so it needs
no lock.
"""

from __future__ import annotations

from collections.abc import Callable


class Switch:
    """A flag that, once set, stays set and has called each of its callbacks once."""

    __slots__ = ("_callbacks", "_on")

    def __init__(self) -> None:
        self._on = False
        # A dict as an ordered set: a run removes its callback in O(1) when it ends,
        # and thousands of runs may share one switch.
        self._callbacks: dict[Callable[[], None], None] = {}

    def set(self) -> None:
        """Turn on and call every callback (once), here and now. Idempotent.

        One callback raising does not keep the others from their stop: each is called,
        then the first exception is raised.
        """
        if self._on:
            return
        self._on = True
        callbacks = list(self._callbacks)
        self._callbacks.clear()
        first: Exception | None = None
        for fn in callbacks:
            try:
                fn()
            except Exception as exc:  # re-raised below, once the others had their call
                first = first or exc
        if first is not None:
            raise first

    def is_set(self) -> bool:
        return self._on

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` when the switch is set; if it is set already, call it now."""
        if self._on:
            fn()
        else:
            self._callbacks[fn] = None

    def remove_callback(self, fn: Callable[[], None]) -> None:
        """Forget ``fn`` (no error if it was never added or has been called)."""
        self._callbacks.pop(fn, None)
