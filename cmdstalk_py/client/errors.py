"""Every error a beanstalkd client meets, and the one table from reply words to them.

Two kinds: ``ReplyError`` (the server answered with an error word; the connection is fine
and the next reply is in step) and ``ConnectionFailure`` (the connection is lost, silent,
or out of step: whatever was in flight is unknown, and the connection must be dropped).
A reply that cannot be parsed is a ``ConnectionFailure`` (``UnexpectedReply``), never a
``ValueError`` or ``AssertionError``, so a bug elsewhere is not mistaken for a lost server.
"""

from __future__ import annotations


class BeanstalkdError(Exception):
    """The server answered with an error word, or the connection failed."""

    #: The reply word this class stands for.
    reply: str = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.reply)


class ReplyError(BeanstalkdError):
    """The server answered with an error word (``ERROR_REPLIES``)."""


class NotFound(ReplyError):
    reply = "NOT_FOUND"


class TimedOut(ReplyError):
    reply = "TIMED_OUT"


class DeadlineSoon(ReplyError):
    reply = "DEADLINE_SOON"


class Buried(ReplyError):
    """A put or release was carried out, but the job buried: the server could not grow
    its priority queue."""

    reply = "BURIED"


class NotIgnored(ReplyError):
    reply = "NOT_IGNORED"


class OutOfMemory(ReplyError):
    reply = "OUT_OF_MEMORY"


class InternalError(ReplyError):
    reply = "INTERNAL_ERROR"


class BadFormat(ReplyError):
    reply = "BAD_FORMAT"


class UnknownCommand(ReplyError):
    reply = "UNKNOWN_COMMAND"


class ExpectedCrlf(ReplyError):
    reply = "EXPECTED_CRLF"


class JobTooBig(ReplyError):
    reply = "JOB_TOO_BIG"


class Draining(ReplyError):
    reply = "DRAINING"


class ConnectionFailure(BeanstalkdError):
    """The connection cannot be used any more: drop it (a new one may work)."""


class ConnectionLost(ConnectionFailure):
    """The server closed the connection, the socket failed, or the server went silent."""

    reply = "CONNECTION_LOST"


class UnexpectedReply(ConnectionFailure):
    """A reply that makes no sense for the command sent (a protocol desync)."""

    reply = "UNEXPECTED"


#: What an unusable connection raises: socket errors and timeouts (``OSError``), the end
#: of the stream and replies out of step (``ConnectionFailure``). Drop it after any.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (OSError, ConnectionFailure)


#: Reply word → the exception it raises. The only such table on the client side.
ERROR_REPLIES: dict[bytes, type[ReplyError]] = {
    cls.reply.encode("ascii"): cls
    for cls in (
        NotFound,
        TimedOut,
        DeadlineSoon,
        Buried,
        NotIgnored,
        OutOfMemory,
        InternalError,
        BadFormat,
        UnknownCommand,
        ExpectedCrlf,
        JobTooBig,
        Draining,
    )
}


def error_for(line: bytes) -> BeanstalkdError:
    """The exception for a reply line (without CRLF) that is not the expected reply."""
    word = line.split(b" ", 1)[0]
    cls = ERROR_REPLIES.get(word)
    if cls is None:
        return UnexpectedReply(f"unexpected reply {line[:80]!r}")
    return cls(line.decode("ascii", "replace"))
