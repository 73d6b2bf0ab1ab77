"""The engine's timers: one heap of alarms; stale ones are skipped, and swept in bulk.

An alarm is ``(when, seq, kind, object)``: a delayed job's end of delay (``DELAY``), a
reserved job's TTR (``TTR``), a paused tube's end of pause (``PAUSE``) or a waiting
connection's wake-up for its timeout or DEADLINE_SOON (``WAIT``). Nothing is taken out
when its object moves on (a job deleted, touched, kicked, released; a wait answered):
the alarm goes stale (:func:`live` says so), is skipped when it comes up, and once stale
alarms outnumber the live ones the heap is rebuilt without them.
"""

from __future__ import annotations

from heapq import heappop, heappush

from cmdstalk_py.server.job import DELAYED, RESERVED

DELAY = 0
TTR = 1
PAUSE = 2
WAIT = 3

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    Alarm = tuple[float, int, int, Any]

#: Sweep only past this many stale alarms: a small heap is cheap to skip through.
_SWEEP_FLOOR = 1024


def live(alarm: Alarm) -> bool:
    """Whether the alarm's object is still in the state that set it."""
    when, seq, kind, obj = alarm
    if kind == TTR:
        return bool(obj.state is RESERVED and obj.deadline == when)
    if kind == DELAY:
        return bool(obj.state is DELAYED and obj.deadline == when)
    if kind == PAUSE:
        return bool(obj.paused and obj.unpause_at == when)
    # A waiter's alarm is live while it is the one it set last (a fresh one replaces it).
    return bool(obj.waiting and obj.wake_seq == seq)


class Alarms:
    """A min-heap of alarms by time, then by the order they were set."""

    __slots__ = ("heap", "seq", "stale")

    def __init__(self) -> None:
        #: Earliest first: ``heap[0][0]`` is the next deadline. Swept in place, so a
        #: reference to this list stays valid.
        self.heap: list[Alarm] = []
        self.seq = 0
        #: Alarms whose object moved on: the owner of that move counts them here.
        self.stale = 0

    def add(self, when: float, kind: int, obj: Any) -> int:
        """Set an alarm; its sequence number (tells a waiter's current alarm apart)."""
        seq = self.seq = self.seq + 1
        heappush(self.heap, (when, seq, kind, obj))
        if self.stale > _SWEEP_FLOOR and self.stale * 2 > len(self.heap):
            self._sweep()
        return seq

    def next_deadline(self) -> float | None:
        """When the earliest alarm is due (None: none set)."""
        heap = self.heap
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> Alarm | None:
        """The next live alarm due at ``now``, taken off the heap (None: nothing due)."""
        heap = self.heap
        while heap and heap[0][0] <= now:
            alarm = heappop(heap)
            if live(alarm):
                return alarm
        return None

    def _sweep(self) -> None:
        kept = [alarm for alarm in self.heap if live(alarm)]
        kept.sort()
        # In place: the engine's tick may be draining this very list.
        self.heap[:] = kept
        self.stale = 0
