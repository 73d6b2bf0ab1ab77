"""Tube pauses (``pause-tube``): when one starts, and when it ends (docs §5.5).

A pause keeps ``reserve`` from taking a tube's jobs until its time. It ends on the
engine's tick (its ``PAUSE`` alarm) or, when a reserve comes first, at that reserve: 1.12
ends every pause whose time has come whenever it looks for a job, so a zero pause (1 ns in
1.12) is over for the very next command, even one in the same read. Either way the tube's
waiters are served first, in order.
"""

from __future__ import annotations

from cmdstalk_py.server.alarms import PAUSE, Alarms

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from cmdstalk_py.server.tube import Tube
    from cmdstalk_py.server.waiters import Serve, Waiters


class Pauses:
    """Starts and ends the pauses of one engine's tubes."""

    __slots__ = ("alarms", "serve", "waiters")

    def __init__(self, alarms: Alarms, waiters: Waiters, serve: Serve) -> None:
        self.alarms = alarms
        self.waiters = waiters
        #: The engine's READY -> RESERVED transition, for the waiters a pause held.
        self.serve = serve

    def start(self, t: Tube, delay: int, now: float) -> None:
        """``t`` is paused for ``delay`` seconds from ``now`` (replacing any pause)."""
        if t.paused:
            self.alarms.stale += 1  # the old pause's alarm
        t.paused = True
        t.pause = delay
        t.unpause_at = now + delay
        self.alarms.add(t.unpause_at, PAUSE, t)

    def end(self, t: Tube, now: float) -> None:
        """``t``'s pause is over: its waiters get its ready jobs."""
        t.paused = False
        t.pause = 0
        self.waiters.process_queue([t], now, self.serve)

    def end_due(self, tubes: list[Tube], now: float) -> None:
        """End the pauses among ``tubes`` whose time has come, ahead of their alarms."""
        heap = self.alarms.heap
        if not heap or heap[0][0] > now:
            return  # nothing is due, so no pause is either
        for t in tubes:
            if t.paused and t.unpause_at <= now:
                self.alarms.stale += 1  # its alarm, which goes off later for nothing
                self.end(t, now)
