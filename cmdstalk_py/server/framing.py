"""Framing, sans-IO: a connection's input bytes in, its commands out, in order.

Bytes go in with :meth:`Framer.receive_data` (``b""`` is the end of input); complete
events come out of a pass of :meth:`Framer.events` (a list, what a connection's turn
runs), or one at a time from :meth:`Framer.next_event`, ``None`` meaning "more bytes
needed". No socket, no clock, no engine: the connection (``conn``) feeds it what it reads
and runs what comes out, and stops whenever it must wait (a blocked reserve, ``quit``, a
client that does not read its replies); the events it did not run go back
(:meth:`Framer.unread`), and the input not framed yet stays here.

Follows 1.12 exactly (docs §1): a line ends at the first ``\\r`` if ``\\n`` follows it,
within a 224-byte window; a full window without one is thrown away and the input
discarded up to the next CRLF, which is answered BAD_FORMAT. A ``put`` line announces a
data chunk (its body and CRLF); a put rejected with JOB_TOO_BIG announces one to throw
away before the reply (:meth:`Framer._skip`).

Events: a command value from ``verbs`` the moment its line is complete (a ``Rejected``
too, so that the engine counts it when 1.12 does), then, after a line that announced a
data chunk, :class:`PutBody` or :class:`BodySkipped` once it is in. A put is one event,
:class:`PutBody`, when its body is in the input already; only a put whose body is still on
its way is announced by its ``Put`` line first (1.12 counts it at the line, and another
connection may ask for stats meanwhile), its ``PutBody`` then saying ``announced``.
"""

from __future__ import annotations

from cmdstalk_py.server.limits import DEFAULT_MAX_JOB_SIZE, LINE_LIMIT
from cmdstalk_py.server.protocol import REJECT_BAD_FORMAT, parse_command
from cmdstalk_py.server.verbs import Command, Put, Rejected

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from enum import Enum
    from typing import NamedTuple
else:
    from cmdstalk_py.server.standins import Enum, NamedTuple

__all__ = ["LINE_TOO_LONG", "BodySkipped", "Event", "Framer", "Mode", "PutBody"]


class Mode(Enum):
    """What the next input bytes are."""

    LINE = "line"  # a command line
    BODY = "body"  # the data chunk of a put
    SKIP = "skip"  # the data chunk of a put rejected with JOB_TOO_BIG, thrown away
    LONG_LINE = "long-line"  # the rest of a line past the window, thrown away


class PutBody(NamedTuple):
    """The data chunk of ``put`` (``put.size`` bytes plus what should be its CRLF)."""

    put: Put
    body: bytes
    #: The ``Put`` line came as an event of its own, before its body had arrived.
    announced: bool = False


class BodySkipped(NamedTuple):
    """The data chunk announced by ``rejected`` was thrown away: its reply is due now."""

    rejected: Rejected


#: What :meth:`Framer.events` yields.
Event = Command | PutBody | BodySkipped
#: The event for a line longer than the window (after its CRLF has been found).
LINE_TOO_LONG = REJECT_BAD_FORMAT

_WINDOW = LINE_LIMIT
_LINE = Mode.LINE
_BODY = Mode.BODY
_SKIP = Mode.SKIP
_LONG_LINE = Mode.LONG_LINE
_Put = Put
_Rejected = Rejected
_parse = parse_command
#: Builds the event tuples without the NamedTuple constructor's Python frame.
_new = tuple.__new__


class Framer:
    """The input side of one connection: mode, unread bytes, end of input."""

    __slots__ = (
        "_announced",
        "_buf",
        "_early",
        "_more",
        "_more_len",
        "_need",
        "_pos",
        "_unread",
        "eof",
        "max_job_size",
        "mode",
    )

    def __init__(self, max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> None:
        #: The ``-z`` limit that decides JOB_TOO_BIG.
        self.max_job_size = max_job_size
        self.mode = Mode.LINE
        #: The input has ended (the client half-closed); unread bytes may remain.
        self.eof = False
        # Unread input is _buf[_pos:] followed by the chunks in _more, joined lazily so
        # that a large body arriving in many reads is joined once.
        self._buf = b""
        self._pos = 0
        self._more: list[bytes] = []
        self._more_len = 0
        # BODY: bytes of the chunk (size + 2); SKIP: bytes still to throw away.
        self._need = 0
        # The line that announced the current data chunk.
        self._announced: Put | Rejected | None = None
        # The current put's line went out as an event (its body had not arrived).
        self._early = False
        # Events a pass returned that the caller did not run (see unread).
        self._unread: list[Event] = []

    @property
    def buffered(self) -> int:
        """Bytes received and not yet framed."""
        return len(self._buf) - self._pos + self._more_len

    @property
    def pending(self) -> bool:
        """Input not run yet: events handed back (:meth:`unread`) or bytes not framed."""
        return bool(self._unread) or self.buffered > 0

    def receive_data(self, data: bytes) -> None:
        """Add input; ``b""`` marks its end."""
        if not data:
            self.eof = True
        elif self._pos == len(self._buf) and not self._more:
            self._buf = data
            self._pos = 0
        else:
            self._more.append(data)
            self._more_len += len(data)

    def next_event(self) -> Event | None:
        """The next complete event, or None when it needs more input (a pass of one)."""
        events = self.events(1)
        return events[0] if events else None

    def events(self, limit: int = 1 << 62) -> list[Event]:
        """The complete events in the input, in order, up to ``limit``: those the caller
        does not run (a blocked reserve, ``quit``, a turn's bounds) go back with
        :meth:`unread`. One call per pass, position in locals: a batch is cheap."""
        out, self._unread = self._unread, []
        if len(out) >= limit:
            self._unread = out[limit:]
            return out[:limit]
        append, parse, max_job_size = out.append, _parse, self.max_job_size
        buf, pos, mode = self._buf, self._pos, self.mode
        n = len(buf)
        while True:
            if mode is _LINE:
                if pos == n and not self._more:
                    return out  # the common end of a batch: everything read was complete
                end = pos + _WINDOW
                end = n if end > n else end
                i = buf.find(b"\r", pos, end - 1)
                if i < 0 or buf[i + 1] != 10:
                    if not self._no_line_end(end):
                        return out
                    buf, pos, mode = self._buf, self._pos, self.mode
                    n = len(buf)
                    continue
                event: Event = parse(buf[pos:i], max_job_size)
                self._pos = pos = i + 2
                kind = type(event)
                if kind is _Put:
                    # LINE -> BODY
                    self._announced = event  # type: ignore[assignment]
                    self._need = need = event.size + 2  # type: ignore[union-attr]
                    self.mode = mode = _BODY
                    self._early = n - pos < need  # else one event, once the body is read
                    if not self._early:
                        continue
                elif kind is _Rejected and event.skip:  # type: ignore[union-attr]
                    # LINE -> SKIP
                    self._announced = event  # type: ignore[assignment]
                    self._need = event.skip  # type: ignore[union-attr]
                    self.mode = mode = _SKIP
            elif mode is _BODY:
                need = self._need
                if n - pos < need:  # the chunk spans reads: joined once, when it is all in
                    if n - pos + self._more_len < need:
                        return out
                    self._join()
                    buf, pos = self._buf, 0
                    n = len(buf)
                self._pos = pos = pos + need
                # BODY -> LINE
                self.mode = mode = _LINE
                event = _new(PutBody, (self._announced, buf[pos - need : pos], self._early))
            else:
                found = self._long_line() if mode is _LONG_LINE else self._skip()
                buf, pos, mode = self._buf, self._pos, self.mode
                n = len(buf)
                if found is None:
                    return out
                event = found
            append(event)
            if len(out) >= limit:
                return out

    def unread(self, events: list[Event]) -> None:
        """Events from :meth:`events` that the caller did not run: they come first next."""
        self._unread = events + self._unread

    # ---------------------------------------------------------------- lines past the window

    def _no_line_end(self, end: int) -> bool:
        """No line end before ``end``: join more input (False: none came) or, past a full
        window, give up on the line."""
        if end - self._pos < _WINDOW:
            return self._join()
        # A full window without a line end: drop it, then discard up to a CRLF.
        self._pos = end
        # LINE -> LONG_LINE
        self.mode = _LONG_LINE
        return True

    def _long_line(self) -> Event | None:
        while True:
            buf = self._buf
            pos = self._pos
            end = min(pos + _WINDOW, len(buf))
            i = buf.find(b"\r", pos, end - 1)
            if i >= 0 and buf[i + 1] == 10:
                self._pos = i + 2
                # LONG_LINE -> LINE
                self.mode = _LINE
                return LINE_TOO_LONG
            if end - pos < _WINDOW:
                if not self._join():
                    return None
            else:
                self._pos = end

    def _join(self) -> bool:
        """Move the chunks received since into the scanned buffer; False if there were none."""
        if not self._more:
            return False
        self._buf = b"".join([self._buf[self._pos :], *self._more])
        self._pos = 0
        self._more = []
        self._more_len = 0
        return True

    # ---------------------------------------------------------------- data chunks

    def _skip(self) -> Event | None:
        """SKIP: throw away the data chunk of a put rejected with JOB_TOO_BIG."""
        self._need = need = self._need - self._drop(self._need)
        if need:
            return None
        event = BodySkipped(self._announced)  # type: ignore[arg-type]
        # SKIP -> LINE
        self._announced = None
        self.mode = _LINE
        return event

    def _drop(self, count: int) -> int:
        """Throw away up to ``count`` unread bytes without joining them; how many went."""
        dropped = min(count, len(self._buf) - self._pos)
        self._pos += dropped
        while dropped < count and self._more:
            chunk = self._more.pop(0)
            take = min(count - dropped, len(chunk))
            if take < len(chunk):
                self._more.insert(0, chunk[take:])
            self._more_len -= take
            dropped += take
        return dropped
