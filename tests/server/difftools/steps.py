"""The vocabulary of differential scenarios: steps over numbered raw connections.

A scenario is a flat list of steps. Connections are small integers, opened on first use
(each new connection first gets a counter-free ``kick-job 0`` round trip, so the server
has surely accepted it before anything else happens). ``{j1}``, ``{j2}`` … in sent bytes
stand for the first, second … job id that appeared in a reply on that server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# What a received reply must look like, besides being identical on both servers:
#   str            the normalised reply line ("INSERTED #1", "RESERVED #2 5"); "*" = any
#   (str, bytes)   line and exact data chunk
#   dict           an OK reply whose YAML mapping contains these key: value pairs
#   frozenset      an OK reply whose YAML list holds exactly these names
#   None           any well-formed reply
Want = str | tuple[str, bytes] | Mapping[str, str | int] | frozenset[str] | None


@dataclass(frozen=True)
class Send:
    conn: int
    data: bytes


@dataclass(frozen=True)
class Recv:
    """Read ``len(wants)`` replies; each must arrive within ``within`` s of this step."""

    conn: int
    wants: tuple[Want, ...]
    within: float = 30.0


@dataclass(frozen=True)
class Silent:
    """Nothing may arrive on ``conn`` for ``window`` seconds (a blocked reserve).

    With ``since_mark`` the window is counted from the last ``Mark`` instead of from
    now: used where a protocol timer (a 1 s delay, pause or timeout) started at the mark,
    so that a harness slowed down by a loaded machine never waits into the time when the
    reply is legitimately due. If the window has already passed, nothing is checked.
    """

    conn: int
    window: float = 0.3
    since_mark: bool = False


@dataclass(frozen=True)
class Mark:
    """Remember this instant (just after the previous step) for ``Silent(since_mark)``."""


@dataclass(frozen=True)
class Eof:
    """The server closes ``conn`` (after ``quit``, or after a half-close)."""

    conn: int
    within: float = 30.0


@dataclass(frozen=True)
class Close:
    conn: int


@dataclass(frozen=True)
class HalfClose:
    conn: int


@dataclass(frozen=True)
class Poll:
    """Repeat ``command`` on ``conn`` until its YAML reply contains ``until``.

    Hidden from the transcript; the commands sent are subtracted from later ``stats``
    counters so both servers' transcripts stay comparable however many polls each took.
    ``conn`` None means the harness's own sync connection.
    """

    conn: int | None
    command: bytes
    until: Mapping[str, str]
    timeout: float = 60.0


@dataclass(frozen=True)
class Drain:
    """Switch the server to drain mode (SIGUSR1 for the real one)."""


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: tuple[object, ...]
    max_job_size: int = 65535
    doc: str = ""
    # Seconds of protocol time (TTR, delays) this scenario needs; for the budget.
    slow: bool = False


Step = Send | Recv | Silent | Mark | Eof | Close | HalfClose | Poll | Drain


@dataclass
class ScenarioList:
    """Collects scenarios, refusing duplicate names."""

    items: list[Scenario] = field(default_factory=list)

    def add(
        self,
        name: str,
        *steps: Step | Sequence[Step],
        max_job_size: int = 65535,
        doc: str = "",
        slow: bool = False,
    ) -> None:
        if any(s.name == name for s in self.items):
            raise ValueError(f"duplicate scenario {name}")
        self.items.append(Scenario(name, tuple(flatten(steps)), max_job_size, doc, slow))


def flatten(steps: Iterable[Step | Sequence[Step]]) -> list[Step]:
    out: list[Step] = []
    for s in steps:
        if isinstance(s, Sequence):
            out.extend(s)
        else:
            out.append(s)
    return out


def _b(data: bytes | str) -> bytes:
    return data.encode("latin-1") if isinstance(data, str) else data


def send(conn: int, data: bytes | str) -> Send:
    """Send raw bytes (a ``str`` is encoded as latin-1, ``{jN}`` substituted)."""
    return Send(conn, _b(data))


def recv(conn: int, *wants: Want, within: float = 30.0) -> Recv:
    return Recv(conn, wants, within)


def tx(conn: int, data: bytes | str, *wants: Want, within: float = 30.0) -> list[Step]:
    """Send ``data`` and read one reply per want."""
    return [Send(conn, _b(data)), Recv(conn, wants, within)]


def cmd(conn: int, line: str, want: Want) -> list[Step]:
    """One command line (``\\r\\n`` appended) and its single reply."""
    return tx(conn, line + "\r\n", want)


def put(conn: int, body: bytes | str, pri: int = 0, delay: int = 0, ttr: int = 60,
        want: Want = None) -> list[Step]:
    """A well-formed put of ``body`` and its reply."""
    b = _b(body)
    return tx(conn, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(b), b), want)


def silent(conn: int, window: float = 0.3) -> Silent:
    return Silent(conn, window)


def mark() -> Mark:
    return Mark()


def silent_since_mark(conn: int, window: float = 0.5) -> Silent:
    return Silent(conn, window, since_mark=True)


def eof(conn: int, within: float = 30.0) -> Eof:
    return Eof(conn, within)


def close(conn: int) -> Close:
    return Close(conn)


def half_close(conn: int) -> HalfClose:
    return HalfClose(conn)


def poll(conn: int | None, command: str, until: Mapping[str, str], timeout: float = 60.0) -> Poll:
    return Poll(conn, _b(command + "\r\n"), until, timeout)


def await_stats(**until: str | int) -> Poll:
    """Wait (via hidden ``stats`` polls) until global stats show these values.

    Keyword names use ``_`` for ``-``: ``await_stats(current_waiting=2)``.
    """
    return Poll(None, b"stats\r\n", {k.replace("_", "-"): str(v) for k, v in until.items()})


def drain() -> Drain:
    return Drain()
