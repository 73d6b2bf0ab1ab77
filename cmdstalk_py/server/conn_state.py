"""The states of a server connection (``conn.ServerConn``) and the allowed transitions.

No internal imports: a newcomer reads the lifecycle here, and ``ServerConn._become`` is
the one place a connection's state changes (each caller names its transition).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from enum import Enum
else:
    from cmdstalk_py.server.standins import Enum

__all__ = ["TRANSITIONS", "State"]


class State(Enum):
    """Where a connection is in its life."""

    OPEN = "open"  # commands run as they arrive
    WAITING = "waiting"  # a reserve waits for a job; later commands wait behind it
    CLOSING = "closing"  # quit or end of input: no more commands; closes once output is out
    BROKEN = "broken"  # a send failed: output dropped, torn down on the next loop iteration
    CLOSED = "closed"  # socket closed, session ended


#: Every allowed transition, by the state it leaves.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.OPEN: frozenset({State.WAITING, State.CLOSING, State.BROKEN, State.CLOSED}),
    State.WAITING: frozenset({State.OPEN, State.BROKEN, State.CLOSED}),
    State.CLOSING: frozenset({State.BROKEN, State.CLOSED}),
    State.BROKEN: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}
