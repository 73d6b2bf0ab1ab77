"""The replies of the beanstalkd 1.12 protocol: reply words and reply rendering.

The one table of reply words (``REPLIES``) and the functions that render the replies
carrying values. Pure, no imports: the engine, the commands and the connection all send
these bytes. Re-exported by :mod:`cmdstalk_py.server.protocol`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

CRLF = b"\r\n"

# --------------------------------------------------------------------------------------
# Reply words: the one table.
# --------------------------------------------------------------------------------------

#: Every fixed reply line the server sends, by reply word.
REPLIES: dict[str, bytes] = {
    word: word.encode() + CRLF
    for word in (
        "BAD_FORMAT",
        "UNKNOWN_COMMAND",
        "OUT_OF_MEMORY",
        "INTERNAL_ERROR",
        "EXPECTED_CRLF",
        "JOB_TOO_BIG",
        "DRAINING",
        "NOT_FOUND",
        "NOT_IGNORED",
        "DEADLINE_SOON",
        "TIMED_OUT",
        "DELETED",
        "RELEASED",
        "BURIED",
        "TOUCHED",
        "KICKED",
        "PAUSED",
    )
}

BAD_FORMAT = REPLIES["BAD_FORMAT"]
UNKNOWN_COMMAND = REPLIES["UNKNOWN_COMMAND"]
OUT_OF_MEMORY = REPLIES["OUT_OF_MEMORY"]
INTERNAL_ERROR = REPLIES["INTERNAL_ERROR"]
EXPECTED_CRLF = REPLIES["EXPECTED_CRLF"]
JOB_TOO_BIG = REPLIES["JOB_TOO_BIG"]
DRAINING = REPLIES["DRAINING"]
NOT_FOUND = REPLIES["NOT_FOUND"]
NOT_IGNORED = REPLIES["NOT_IGNORED"]
DEADLINE_SOON = REPLIES["DEADLINE_SOON"]
TIMED_OUT = REPLIES["TIMED_OUT"]
DELETED = REPLIES["DELETED"]
RELEASED = REPLIES["RELEASED"]
BURIED = REPLIES["BURIED"]
TOUCHED = REPLIES["TOUCHED"]
KICKED = REPLIES["KICKED"]
PAUSED = REPLIES["PAUSED"]


#: ``INSERTED <id>``: the format's own ``%`` (no Python frame: one per put).
render_inserted: Callable[[int], bytes] = b"INSERTED %d\r\n".__mod__


def render_buried_id(job_id: int) -> bytes:
    """``BURIED <id>`` (a put whose job could not be queued)."""
    return b"BURIED %d\r\n" % job_id


def render_job(word: bytes, job_id: int, body: bytes) -> bytes:
    """``RESERVED``/``FOUND`` line plus data chunk; ``body`` already ends in CRLF."""
    return b"%b %d %d\r\n%b" % (word, job_id, len(body) - 2, body)


def render_reserved(job_id: int, body: bytes) -> bytes:
    """``RESERVED <id> <bytes>`` + body; ``body`` already ends in CRLF."""
    return b"RESERVED %d %d\r\n%b" % (job_id, len(body) - 2, body)


def render_found(job_id: int, body: bytes) -> bytes:
    """``FOUND <id> <bytes>`` + body; ``body`` already ends in CRLF."""
    return b"FOUND %d %d\r\n%b" % (job_id, len(body) - 2, body)


def render_ok(payload: bytes) -> bytes:
    """``OK <bytes>`` + YAML payload + CRLF."""
    return b"OK %d\r\n%b\r\n" % (len(payload), payload)


def render_using(name: bytes) -> bytes:
    """``USING <tube>``."""
    return b"USING %b\r\n" % name


def render_watching(count: int) -> bytes:
    """``WATCHING <count>``."""
    return b"WATCHING %d\r\n" % count


def render_kicked(count: int) -> bytes:
    """``KICKED <count>``."""
    return b"KICKED %d\r\n" % count


def render_yaml_list(names: list[bytes]) -> bytes:
    """The ``list-tubes``/``list-tubes-watched`` YAML body."""
    return b"---\n" + b"".join(b"- %b\n" % n for n in names)

