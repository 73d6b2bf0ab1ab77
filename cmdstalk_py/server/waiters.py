"""Blocked reserves: connections waiting for a job, their wake-ups and their answers.

A reserve that finds no job (``Engine.reserve``) starts a wait here: the connection is
queued on every tube it watches and, if its wait can end without a job (a timeout, or
DEADLINE_SOON for a reservation it holds), gets a ``WAIT`` alarm. A wait ends in one of
four ways, each written once:

* a job becomes ready in a watched tube: the engine hands it over (``Engine._make_ready``
  to the tube's first waiter; :meth:`Waiters.process_queue` when a tube gains ready jobs
  in bulk or its pause ends), and the reserved job is the answer;
* its alarm comes up (:meth:`Waiters.wake`): TIMED_OUT or DEADLINE_SOON, or re-armed;
* the client half-closes (:meth:`Waiters.abort`);
* the connection closes (the engine ends the wait before giving back its jobs).

The engine owns every job transition; this module only decides who waits, in which order
they are served and when a wait is over. Answers are queued in :attr:`Waiters.deliveries`
for the network layer (:meth:`Waiters.take`).
"""

from __future__ import annotations

from cmdstalk_py.server.alarms import WAIT, Alarms
from cmdstalk_py.server.tube import best_ready

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    from cmdstalk_py.server.job import Job
    from cmdstalk_py.server.outcome import Outcome
    from cmdstalk_py.server.session import Session
    from cmdstalk_py.server.tube import Tube

    #: A waiter's answer: the job it reserved, or why it got none.
    Answer = Job | Outcome
    #: The engine's READY -> RESERVED transition of a tube's best job for a session.
    Serve = Callable[[Session, Tube, float], Answer]


class Waiters:
    """The connections blocked in a reserve, and the answers they are due."""

    __slots__ = ("alarms", "count", "deliveries")

    def __init__(self, alarms: Alarms) -> None:
        self.alarms = alarms
        #: Connections blocked in a reserve (``current-waiting``).
        self.count = 0
        #: (session, answer) for connections whose blocked reserve just ended, in order.
        self.deliveries: list[tuple[Session, Answer]] = []

    def start(self, s: Session, timeout: int, now: float) -> None:
        """``s`` blocks in a reserve; ``timeout`` -1 waits for ever."""
        s.start_wait(timeout, now)
        self.count += 1
        self._arm(s)

    def end(self, s: Session) -> None:
        """``s`` stops waiting (answered, given up or closed)."""
        s.end_wait()
        self.count -= 1

    def abort(self, s: Session) -> bool:
        """The client half-closed while waiting: stop (False if it was not waiting)."""
        if not s.waiting:
            return False
        self.end(s)
        return True

    def answer(self, s: Session, answer: Answer) -> None:
        """Queue the answer of ``s``'s ended wait for the network layer."""
        self.deliveries.append((s, answer))

    def wake(self, s: Session, now: float) -> None:
        """``s``'s alarm came up: answer TIMED_OUT or DEADLINE_SOON, or wait on."""
        over = s.wait_over(now)
        if over is None:
            self._arm(s)
        else:
            self.end(s)
            self.deliveries.append((s, over))

    def process_queue(self, tubes: list[Tube], now: float, serve: Serve) -> None:
        """1.12's process_queue restricted to ``tubes``, which just gained ready jobs.

        Gives the best (pri, id) job among tubes with waiters to that tube's first
        waiter (through ``serve``, the engine's transition), and repeats.
        """
        while (best := best_ready(t for t in tubes if t.waiting)) is not None:
            s = next(iter(best.waiting))
            self.end(s)
            self.deliveries.append((s, serve(s, best, now)))

    def take(self) -> list[tuple[Session, Answer]]:
        """The answers queued since the last call: a reserved job, TIMED_OUT,
        DEADLINE_SOON or JOURNAL_FAILED."""
        out = self.deliveries
        self.deliveries = []
        return out

    def _arm(self, s: Session) -> None:
        wake = s.wake_at()
        if wake is not None:
            s.wake_seq = self.alarms.add(wake, WAIT, s)
