"""The beanstalkd 1.12 wire protocol: command lines in, reply bytes out.

Pure functions and immutable values only: no state, no I/O. Every rule that decides
BAD_FORMAT, UNKNOWN_COMMAND, EXPECTED_CRLF or JOB_TOO_BIG lives here, following what the
1.12 binary does (see docs/beanstalkd-protocol.md §1-§4), including its strtol/strtoul
leniencies for ``kick`` and ``reserve-with-timeout``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Re-exported: the parser's users read the limits and command values from here.
from cmdstalk_py.server.limits import DEFAULT_MAX_JOB_SIZE as DEFAULT_MAX_JOB_SIZE
from cmdstalk_py.server.limits import LINE_LIMIT as LINE_LIMIT
from cmdstalk_py.server.limits import MAX_JOB_SIZE_CAP as MAX_JOB_SIZE_CAP
from cmdstalk_py.server.limits import MAX_NAME as MAX_NAME
from cmdstalk_py.server.verbs import LIST_TUBE_USED as LIST_TUBE_USED
from cmdstalk_py.server.verbs import LIST_TUBES as LIST_TUBES
from cmdstalk_py.server.verbs import LIST_TUBES_WATCHED as LIST_TUBES_WATCHED
from cmdstalk_py.server.verbs import PEEK_BURIED as PEEK_BURIED
from cmdstalk_py.server.verbs import PEEK_DELAYED as PEEK_DELAYED
from cmdstalk_py.server.verbs import PEEK_READY as PEEK_READY
from cmdstalk_py.server.verbs import QUIT as QUIT
from cmdstalk_py.server.verbs import RESERVE as RESERVE
from cmdstalk_py.server.verbs import STATS as STATS
from cmdstalk_py.server.verbs import Bury as Bury
from cmdstalk_py.server.verbs import Command as Command
from cmdstalk_py.server.verbs import Delete as Delete
from cmdstalk_py.server.verbs import Ignore as Ignore
from cmdstalk_py.server.verbs import Kick as Kick
from cmdstalk_py.server.verbs import KickJob as KickJob
from cmdstalk_py.server.verbs import ListTubes as ListTubes
from cmdstalk_py.server.verbs import ListTubesWatched as ListTubesWatched
from cmdstalk_py.server.verbs import ListTubeUsed as ListTubeUsed
from cmdstalk_py.server.verbs import PauseTube as PauseTube
from cmdstalk_py.server.verbs import Peek as Peek
from cmdstalk_py.server.verbs import PeekBuried as PeekBuried
from cmdstalk_py.server.verbs import PeekDelayed as PeekDelayed
from cmdstalk_py.server.verbs import PeekReady as PeekReady
from cmdstalk_py.server.verbs import Put as Put
from cmdstalk_py.server.verbs import Quit as Quit
from cmdstalk_py.server.verbs import Rejected as Rejected
from cmdstalk_py.server.verbs import Release as Release
from cmdstalk_py.server.verbs import Reserve as Reserve
from cmdstalk_py.server.verbs import ReserveJob as ReserveJob
from cmdstalk_py.server.verbs import Stats as Stats
from cmdstalk_py.server.verbs import StatsJob as StatsJob
from cmdstalk_py.server.verbs import StatsTube as StatsTube
from cmdstalk_py.server.verbs import Touch as Touch
from cmdstalk_py.server.verbs import Use as Use
from cmdstalk_py.server.verbs import Watch as Watch

#: Priorities below this count as urgent.
URGENT_THRESHOLD = 1024

U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

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


def render_inserted(job_id: int) -> bytes:
    """``INSERTED <id>``."""
    return b"INSERTED %d\r\n" % job_id


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


REJECT_BAD_FORMAT = Rejected(BAD_FORMAT)
#: A parser gets the whole line, where its arguments start, and the ``-z`` limit.
Parser = Callable[[bytes, int, int], Command]
REJECT_UNKNOWN = Rejected(UNKNOWN_COMMAND)

# --------------------------------------------------------------------------------------
# Scanning helpers (1.12's read_u32/read_u64, strtol, strtoul, name rules).
# --------------------------------------------------------------------------------------

_DIGITS = frozenset(b"0123456789")
NAME_CHARS = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"
)
# C isspace() in the "C" locale, skipped by strtol/strtoul.
_C_SPACE = frozenset(b" \t\n\v\f\r")
_SPACE = 0x20
_MINUS = 0x2D
_PLUS = 0x2B


def valid_name(name: bytes) -> bool:
    """Tube name rule: 1-200 allowed bytes, not starting with ``-``."""
    return (
        0 < len(name) <= MAX_NAME
        and name[0] != _MINUS
        and all(c in NAME_CHARS for c in name)
    )


def read_numbers(line: bytes, pos: int, limits: tuple[int, ...]) -> list[int] | None:
    """Strictly read ``len(limits)`` numbers starting at ``pos``, up to the end of line.

    Each number: skip spaces, then at least one digit, value <= its limit. The last
    number must end exactly at the end of the line. Returns None on any violation.
    """
    values, end = read_numbers_open(line, pos, limits)
    if values is None or end != len(line):
        return None
    return values


def read_numbers_open(
    line: bytes, pos: int, limits: tuple[int, ...]
) -> tuple[list[int] | None, int]:
    """Like :func:`read_numbers` but trailing text is allowed; returns (values, end)."""
    n = len(line)
    values: list[int] = []
    for limit in limits:
        while pos < n and line[pos] == _SPACE:
            pos += 1
        start = pos
        while pos < n and line[pos] in _DIGITS:
            pos += 1
        if pos == start:
            return None, pos
        value = int(line[start:pos])
        if value > limit:
            return None, pos
        values.append(value)
    return values, pos


def _fast_numbers(rest: bytes, count: int, limit: int) -> list[int] | None:
    """The common shape ``"<d> <d> ..."`` (single spaces, all digits) or None."""
    parts = rest.split(b" ")
    if len(parts) != count:
        return None
    out = []
    for p in parts:
        if not p.isdigit():
            return None
        v = int(p)
        if v > limit:
            return None
        out.append(v)
    return out


def c_strtol(text: bytes) -> tuple[int, bool, bool]:
    """C ``strtol``/``strtoul`` scanning of ``text`` in base 10.

    Returns (magnitude with sign applied, any digits read, overflowed 64 bits). Leading C
    whitespace and one sign are accepted; scanning stops at the first non-digit.
    """
    i = 0
    n = len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    negative = False
    if i < n and text[i] in (_MINUS, _PLUS):
        negative = text[i] == _MINUS
        i += 1
    start = i
    while i < n and text[i] in _DIGITS:
        i += 1
    if i == start:
        return 0, False, False
    value = int(text[start:i])
    return (-value if negative else value), True, False


def _parse_kick(line: bytes, pos: int) -> Command:
    value, digits, _ = c_strtol(line[pos:])
    if not digits:
        return REJECT_BAD_FORMAT
    # strtoul: magnitude must fit in an unsigned long (64 bits), negation wraps.
    if abs(value) > U64_MAX:
        return REJECT_BAD_FORMAT
    return Kick((value & U64_MAX) & U32_MAX)


def _parse_reserve_timeout(line: bytes, pos: int) -> Command:
    value, _digits, _ = c_strtol(line[pos:])
    # strtol: outside the signed 64-bit range is ERANGE → BAD_FORMAT; no digits → 0.
    if value < _I64_MIN or value > _I64_MAX:
        return REJECT_BAD_FORMAT
    # The result is stored in a C int: keep the low 32 bits, as a signed value.
    t32 = ((value + (1 << 31)) & U32_MAX) - (1 << 31)
    return Reserve(t32 if t32 >= 0 else -1, True)


def _ids(line: bytes, pos: int) -> int | None:
    rest = line[pos:]
    if rest.isdigit():
        v = int(rest)
        return v if v <= U64_MAX else None
    values = read_numbers(line, pos, (U64_MAX,))
    return None if values is None else values[0]


def _parse_put(line: bytes, pos: int, max_job_size: int) -> Command:
    nums = _fast_numbers(line[pos:], 4, U32_MAX)
    if nums is not None:
        pri, delay, ttr, size = nums
        if size > max_job_size:
            return Rejected(JOB_TOO_BIG, "put", size + 2)
        return Put(pri, delay, ttr, size)
    values, end = read_numbers_open(line, pos, (U32_MAX, U32_MAX, U32_MAX, U32_MAX))
    if values is None:
        return REJECT_BAD_FORMAT
    if values[3] > max_job_size:
        return Rejected(JOB_TOO_BIG, "put", values[3] + 2)
    if end != len(line):
        return Rejected(BAD_FORMAT, "put")
    return Put(*values)


def _id_command(cls: Callable[[int], Command]) -> Parser:
    def parse(line: bytes, pos: int, max_job_size: int) -> Command:
        job_id = _ids(line, pos)
        if job_id is None:
            return REJECT_BAD_FORMAT
        return cls(job_id)

    return parse


def _parse_release(line: bytes, pos: int, max_job_size: int) -> Command:
    values = _fast_numbers(line[pos:], 3, U64_MAX) or read_numbers(
        line, pos, (U64_MAX, U32_MAX, U32_MAX)
    )
    if values is None or values[1] > U32_MAX or values[2] > U32_MAX:
        return REJECT_BAD_FORMAT
    return Release(values[0], values[1], values[2])


def _parse_bury(line: bytes, pos: int, max_job_size: int) -> Command:
    values = _fast_numbers(line[pos:], 2, U64_MAX) or read_numbers(
        line, pos, (U64_MAX, U32_MAX)
    )
    if values is None or values[1] > U32_MAX:
        return REJECT_BAD_FORMAT
    return Bury(values[0], values[1])


def _name_command(cls: Callable[[bytes], Command]) -> Parser:
    def parse(line: bytes, pos: int, max_job_size: int) -> Command:
        name = line[pos:]
        if not valid_name(name):
            return REJECT_BAD_FORMAT
        return cls(name)

    return parse


def _parse_pause_tube(line: bytes, pos: int, max_job_size: int) -> Command:
    n = len(line)
    while pos < n and line[pos] == _SPACE:
        pos += 1
    start = pos
    while pos < n and line[pos] in NAME_CHARS:
        pos += 1
    name = line[start:pos]
    values = read_numbers(line, pos, (U32_MAX,))
    if not name or values is None:
        return REJECT_BAD_FORMAT
    # 1.12 counts the command here, before checking the name's length and first byte.
    if not valid_name(name):
        return Rejected(BAD_FORMAT, "pause-tube")
    return PauseTube(name, values[0])


def _parse_kick_cmd(line: bytes, pos: int, max_job_size: int) -> Command:
    return _parse_kick(line, pos)


def _parse_rwt(line: bytes, pos: int, max_job_size: int) -> Command:
    return _parse_reserve_timeout(line, pos)


def _exact(cmd: Command, prefix: bytes) -> Parser:
    size = len(prefix)

    def parse(line: bytes, pos: int, max_job_size: int) -> Command:
        return cmd if len(line) == size else REJECT_BAD_FORMAT

    return parse


def _quit(line: bytes, pos: int, max_job_size: int) -> Command:
    return QUIT


# 1.12's which_cmd(): compared by prefix, in this order, first match wins.
_PREFIX_TABLE: list[tuple[bytes, Parser]] = [
    (b"put ", _parse_put),
    (b"peek ", _id_command(Peek)),
    (b"peek-ready", _exact(PEEK_READY, b"peek-ready")),
    (b"peek-delayed", _exact(PEEK_DELAYED, b"peek-delayed")),
    (b"peek-buried", _exact(PEEK_BURIED, b"peek-buried")),
    (b"reserve-with-timeout ", _parse_rwt),
    (b"reserve-job ", _id_command(ReserveJob)),
    (b"reserve", _exact(RESERVE, b"reserve")),
    (b"delete ", _id_command(Delete)),
    (b"release ", _parse_release),
    (b"bury ", _parse_bury),
    (b"kick ", _parse_kick_cmd),
    (b"kick-job ", _id_command(KickJob)),
    (b"touch ", _id_command(Touch)),
    (b"stats-job ", _id_command(StatsJob)),
    (b"stats-tube ", _name_command(StatsTube)),
    (b"stats", _exact(STATS, b"stats")),
    (b"use ", _name_command(Use)),
    (b"watch ", _name_command(Watch)),
    (b"ignore ", _name_command(Ignore)),
    (b"list-tubes-watched", _exact(LIST_TUBES_WATCHED, b"list-tubes-watched")),
    (b"list-tube-used", _exact(LIST_TUBE_USED, b"list-tube-used")),
    (b"list-tubes", _exact(LIST_TUBES, b"list-tubes")),
    (b"quit", _quit),
    (b"pause-tube", _parse_pause_tube),
]

# Fast path, keyed by the first word of a line that has a space after it. For every such
# word no earlier prefix in _PREFIX_TABLE can match (checked in the tests), so looking the
# word up gives the same answer as the ordered scan.
_BY_WORD: dict[bytes, Parser] = {
    prefix[:-1]: fn for prefix, fn in _PREFIX_TABLE if prefix.endswith(b" ")
}
_BY_WORD[b"pause-tube"] = _parse_pause_tube
_BY_WORD[b"quit"] = _quit
# Exact argument-less lines.
_EXACT_LINES: dict[bytes, Command] = {
    b"reserve": RESERVE,
    b"peek-ready": PEEK_READY,
    b"peek-delayed": PEEK_DELAYED,
    b"peek-buried": PEEK_BURIED,
    b"stats": STATS,
    b"list-tubes": LIST_TUBES,
    b"list-tube-used": LIST_TUBE_USED,
    b"list-tubes-watched": LIST_TUBES_WATCHED,
    b"quit": QUIT,
}


# Fast paths for the commonest well-formed lines; anything else takes the general route,
# which gives the same answer for these lines too (checked in the tests).
_FAST_PUT = re.compile(rb"put ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10})").fullmatch
_FAST_ID = re.compile(
    rb"(delete|touch|peek|reserve-job|kick-job|stats-job) ([0-9]{1,19})"
).fullmatch
_FAST_RWT = re.compile(rb"reserve-with-timeout ([0-9]{1,9})").fullmatch
_ID_CLASSES: dict[bytes, type] = {
    b"delete": Delete,
    b"touch": Touch,
    b"peek": Peek,
    b"reserve-job": ReserveJob,
    b"kick-job": KickJob,
    b"stats-job": StatsJob,
}
_new = tuple.__new__


def parse_command(line: bytes, max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> Command:
    """Parse one command line (without its CRLF) into a command value.

    ``max_job_size`` decides JOB_TOO_BIG for ``put``. Errors come back as
    :class:`Rejected`; nothing raises.
    """
    exact = _EXACT_LINES.get(line)
    if exact is not None:
        return exact
    m = _FAST_PUT(line)
    if m is not None:
        a, b, c, d = m.groups()
        pri, delay, ttr, size = int(a), int(b), int(c), int(d)
        if pri <= U32_MAX and delay <= U32_MAX and ttr <= U32_MAX and size <= U32_MAX:
            if size > max_job_size:
                return Rejected(JOB_TOO_BIG, "put", size + 2)
            return _new(Put, (pri, delay, ttr, size))
        return REJECT_BAD_FORMAT
    m = _FAST_ID(line)
    if m is not None:
        # 19 digits always fit in a u64.
        word, digits = m.groups()
        return _new(_ID_CLASSES[word], (int(digits),))
    m = _FAST_RWT(line)
    if m is not None:
        return _new(Reserve, (int(m.group(1)), True))
    return _parse_general(line, max_job_size)


def _parse_general(line: bytes, max_job_size: int) -> Command:
    sp = line.find(b" ")
    if sp > 0:
        fn = _BY_WORD.get(line[:sp])
        if fn is not None:
            if b"\x00" in line:
                return REJECT_BAD_FORMAT
            cmd: Command = fn(line, sp + 1, max_job_size)
            return cmd
    if b"\x00" in line:
        return REJECT_BAD_FORMAT
    for prefix, fn in _PREFIX_TABLE:
        if line.startswith(prefix):
            slow: Command = fn(line, len(prefix), max_job_size)
            return slow
    return REJECT_UNKNOWN
