"""``Snapshots``: each ``/api`` part (and ``/metrics``) rendered at most once per
``max_age``, however many clients ask, off the event loop.

Hundreds of pages polling ``/api/state`` cost one rendering every half second: a request
within ``max_age`` of the last rendering gets its bytes; one arriving while a rendering is
under way waits for that one. An action ``expire()``s them all, so the poll that follows it
shows its effect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from cmdstalk_py.ops.dashboard.offload import Offload

MAX_AGE = 0.5
Rendered = tuple[bytes, str]  # body, content type


class Snapshots:
    """``await get(name)``: ``parts[name]()``'s latest rendering, no older than ``max_age``
    (as of when it began) and no older than the last ``expire()``."""

    def __init__(
        self,
        parts: dict[str, Callable[[], Rendered]],
        offload: Offload,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parts = parts
        self.renderings = 0  # how many were made (tests: one per max_age under a flood)
        self._offload = offload
        self._max_age = max_age
        self._clock = clock
        self._generation = 0
        self._done: dict[str, tuple[float, int, Rendered]] = {}  # began at, generation
        self._pending: dict[str, tuple[int, asyncio.Task[Rendered]]] = {}

    async def get(self, name: str) -> Rendered:
        done = self._done.get(name)
        fresh = done is not None and self._clock() - done[0] < self._max_age
        if done is not None and fresh and done[1] == self._generation:
            return done[2]
        pending = self._pending.get(name)
        if pending is None or pending[0] != self._generation:
            task = asyncio.ensure_future(self._render(name, self._generation))
            task.add_done_callback(_retrieved)  # its waiters may all have gone
            pending = self._pending[name] = (self._generation, task)
        # Shielded: a client that hangs up must not cancel what the others wait for.
        return await asyncio.shield(pending[1])

    async def _render(self, name: str, generation: int) -> Rendered:
        began = self._clock()
        self.renderings += 1
        try:
            rendered = await self._offload.run(self.parts[name])
        finally:
            pending = self._pending.get(name)
            if pending is not None and pending[0] == generation:
                del self._pending[name]
        if generation == self._generation:
            self._done[name] = (began, generation, rendered)
        return rendered

    def cancel(self) -> None:
        """Abandon the renderings under way (the loop is closing: none must be left
        pending on it)."""
        for _, task in self._pending.values():
            task.cancel()

    def expire(self) -> None:
        """Forget every rendering: the next ``get`` renders anew."""
        self._generation += 1


def _retrieved(task: asyncio.Task[Rendered]) -> None:
    if not task.cancelled():
        task.exception()
