"""A worker's watch set: the tubes it may reserve from, asked for before each reserve.

``WatchPlan`` joins a worker's candidate tubes (fixed: ``--tubes``, ``--per-tube``; or
what discovery found on its server for ``--all`` and globs) with its pool's ``Gate``
(per-tube limits and rates). Without limits or rates every candidate is watched and the
gate only counts; a standalone ``Broker`` gets a plan of its one tube.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence

from cmdstalk_py.supervisor.gate import Gate


class WatchPlan:
    """The tubes of one server a worker may watch, through the pool's gate.

    ``tubes``: the candidates, or a callable returning the current ones (discovery);
    ``server``: the key claims are counted under (one per server).
    """

    def __init__(
        self,
        tubes: Sequence[str] | Callable[[], Sequence[str]],
        gate: Gate | None = None,
        server: object = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tubes = tubes
        self.server = server
        self._clock = clock
        self.gate = gate if gate is not None else Gate({}, {}, clock())

    def candidates(self) -> tuple[str, ...]:
        tubes = self._tubes() if callable(self._tubes) else self._tubes
        return tuple(tubes)

    def claim(self, key: Hashable) -> tuple[str, ...]:
        """The watch set for the next reserve (empty: nothing may be reserved now)."""
        return self.gate.claim(key, self.server, self.candidates(), self._clock())

    def started(self, key: Hashable, tube: str) -> None:
        self.gate.started(key, tube, self._clock())

    def finished(self, tube: str) -> None:
        self.gate.finished(tube, self._clock())

    def release(self, key: Hashable) -> None:
        self.gate.release(key)

    def wait_for_change(self, wake: Callable[[], None]) -> float:
        """For a worker that claimed nothing: 0 if a candidate is servable by now; else
        ``wake`` is called at the gate's next change, and the result is the seconds until a
        rate-held candidate's next token (inf: only a change can help)."""
        timeout = self.gate.next_change(self.candidates(), self._clock(), wake)
        return 0.0 if timeout is None else timeout
