"""What the engine answers when it has no job to hand back.

The engine's transitions return the job they moved, or one of these values; the
protocol side (:mod:`cmdstalk_py.server.commands`) turns both into reply lines. A
blocked reserve answered later (by a put, release, kick, TTR expiry, pause end or its
own timeout) gets one of these, or its job, through ``Engine.waiters``
(:mod:`~cmdstalk_py.server.waiters`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from enum import Enum
else:
    from cmdstalk_py.server.standins import Enum

class Outcome(Enum):
    """A transition that did not happen, or a reserve that ended without a job."""

    #: No such job, or not in a state (or not held by the connection) that allows it.
    NOT_FOUND = "not found"
    #: The journal refused to record the change, so nothing was applied.
    JOURNAL_FAILED = "journal failed"
    #: Drain mode: no new jobs are accepted.
    DRAINING = "draining"
    #: A put's body did not end in CRLF.
    BAD_BODY = "bad body"
    #: A reserve's timeout ran out (or the client half-closed while it waited).
    TIMED_OUT = "timed out"
    #: A reservation of the reserving connection is within the safety margin.
    DEADLINE_SOON = "deadline soon"
    #: The reserve blocks: its answer comes later, as a delivery.
    WAITING = "waiting"


NOT_FOUND = Outcome.NOT_FOUND
JOURNAL_FAILED = Outcome.JOURNAL_FAILED
DRAINING = Outcome.DRAINING
BAD_BODY = Outcome.BAD_BODY
TIMED_OUT = Outcome.TIMED_OUT
DEADLINE_SOON = Outcome.DEADLINE_SOON
WAITING = Outcome.WAITING
