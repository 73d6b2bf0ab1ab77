"""The protocol's commands as immutable values, one class per command (docs §4.2).

Parsed by :mod:`cmdstalk_py.server.protocol`, executed by
:mod:`cmdstalk_py.server.commands`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from cmdstalk_py.server.standins import NamedTuple


# --------------------------------------------------------------------------------------


class Put(NamedTuple):
    """``put``: the body (``size`` bytes + CRLF) follows on the wire."""

    pri: int
    delay: int
    ttr: int
    size: int


class Reserve(NamedTuple):
    """``reserve`` (``timeout`` -1) or ``reserve-with-timeout`` (``timeout`` >= 0 or -1)."""

    timeout: int
    with_timeout: bool


class ReserveJob(NamedTuple):
    """``reserve-job <id>``."""

    id: int


class Delete(NamedTuple):
    """``delete <id>``."""

    id: int


class Release(NamedTuple):
    """``release <id> <pri> <delay>``."""

    id: int
    pri: int
    delay: int


class Bury(NamedTuple):
    """``bury <id> <pri>``."""

    id: int
    pri: int


class Touch(NamedTuple):
    """``touch <id>``."""

    id: int


class Use(NamedTuple):
    """``use <tube>``."""

    name: bytes


class Watch(NamedTuple):
    """``watch <tube>``."""

    name: bytes


class Ignore(NamedTuple):
    """``ignore <tube>``."""

    name: bytes


class Peek(NamedTuple):
    """``peek <id>``."""

    id: int


class PeekReady(NamedTuple):
    """``peek-ready``."""


class PeekDelayed(NamedTuple):
    """``peek-delayed``."""


class PeekBuried(NamedTuple):
    """``peek-buried``."""


class Kick(NamedTuple):
    """``kick <bound>`` (bound already truncated to 32 bits)."""

    bound: int


class KickJob(NamedTuple):
    """``kick-job <id>``."""

    id: int


class StatsJob(NamedTuple):
    """``stats-job <id>``."""

    id: int


class StatsTube(NamedTuple):
    """``stats-tube <tube>``."""

    name: bytes


class Stats(NamedTuple):
    """``stats``."""


class ListTubes(NamedTuple):
    """``list-tubes``."""


class ListTubeUsed(NamedTuple):
    """``list-tube-used``."""


class ListTubesWatched(NamedTuple):
    """``list-tubes-watched``."""


class PauseTube(NamedTuple):
    """``pause-tube <tube> <delay>``."""

    name: bytes
    delay: int


class Quit(NamedTuple):
    """``quit``: close the connection."""


class Rejected(NamedTuple):
    """A line answered with an error without touching the queue.

    ``counter`` names the ``cmd-*`` counter the line still increments (1.12 counts ``put``
    once its numbers parse and ``pause-tube`` before validating it), ``skip`` is how many
    bytes after the line must be read and thrown away before replying (JOB_TOO_BIG).
    """

    reply: bytes
    counter: str | None = None
    skip: int = 0


Command = (
    Put
    | Reserve
    | ReserveJob
    | Delete
    | Release
    | Bury
    | Touch
    | Use
    | Watch
    | Ignore
    | Peek
    | PeekReady
    | PeekDelayed
    | PeekBuried
    | Kick
    | KickJob
    | StatsJob
    | StatsTube
    | Stats
    | ListTubes
    | ListTubeUsed
    | ListTubesWatched
    | PauseTube
    | Quit
    | Rejected
)

# Argument-less commands are singletons: parsing them allocates nothing.
RESERVE = Reserve(-1, False)
PEEK_READY = PeekReady()
PEEK_DELAYED = PeekDelayed()
PEEK_BURIED = PeekBuried()
STATS = Stats()
LIST_TUBES = ListTubes()
LIST_TUBE_USED = ListTubeUsed()
LIST_TUBES_WATCHED = ListTubesWatched()
QUIT = Quit()

