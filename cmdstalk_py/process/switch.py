"""``Switch``: a flag owned by the event loop that acts at once when set.

A pool's stop, kill and kill-now requests are switches: setting one calls every callback
registered on it (a running command's kill, a worker's wake-up), so nothing polls. Only
the loop's thread sets a switch or registers on it; another thread hands a request in with
``loop.call_soon_threadsafe(switch.set)``.
"""

from __future__ import annotations

from collections.abc import Callable


class Switch:
    """Off until ``set``; then on for good."""

    __slots__ = ("_callbacks", "_on")

    def __init__(self) -> None:
        self._on = False
        self._callbacks: dict[Callable[[], None], None] = {}

    def set(self) -> None:
        """Turn on (again: nothing happens) and call each registered callback once."""
        if self._on:
            return
        self._on = True
        callbacks, self._callbacks = self._callbacks, {}
        for callback in callbacks:
            callback()

    def is_set(self) -> bool:
        return self._on

    def add_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the switch is set (at once if it is on already)."""
        if self._on:
            callback()
        else:
            self._callbacks[callback] = None

    def remove_callback(self, callback: Callable[[], None]) -> None:
        """Forget ``callback`` (no error if it is not registered)."""
        self._callbacks.pop(callback, None)
