"""The beanstalkd 1.12 wire protocol: command lines in, command values out.

Pure functions and immutable values only: no state, no I/O. Every rule that decides
BAD_FORMAT, UNKNOWN_COMMAND or JOB_TOO_BIG for a command line lives here, following what
the 1.12 binary does (see docs/beanstalkd-protocol.md §1-§4), including its
strtol/strtoul leniencies for ``kick`` and ``reserve-with-timeout`` (scanned by ``scan``).
The replies (the one table of reply words, and rendering) are ``replies``; the command
values are ``verbs``; both are re-exported here, as are the limits, for the parser's users.
"""

from __future__ import annotations

from cmdstalk_py.client.names import TUBE_NAME_CHARS, is_tube_name

# Re-exported: the parser's users read the limits, replies and command values from here.
from cmdstalk_py.server.limits import DEFAULT_MAX_JOB_SIZE as DEFAULT_MAX_JOB_SIZE
from cmdstalk_py.server.limits import LINE_LIMIT as LINE_LIMIT
from cmdstalk_py.server.limits import MAX_JOB_SIZE_CAP as MAX_JOB_SIZE_CAP
from cmdstalk_py.server.limits import MAX_NAME as MAX_NAME
from cmdstalk_py.server.replies import BAD_FORMAT as BAD_FORMAT
from cmdstalk_py.server.replies import BURIED as BURIED
from cmdstalk_py.server.replies import CRLF as CRLF
from cmdstalk_py.server.replies import DEADLINE_SOON as DEADLINE_SOON
from cmdstalk_py.server.replies import DELETED as DELETED
from cmdstalk_py.server.replies import DRAINING as DRAINING
from cmdstalk_py.server.replies import EXPECTED_CRLF as EXPECTED_CRLF
from cmdstalk_py.server.replies import INTERNAL_ERROR as INTERNAL_ERROR
from cmdstalk_py.server.replies import JOB_TOO_BIG as JOB_TOO_BIG
from cmdstalk_py.server.replies import KICKED as KICKED
from cmdstalk_py.server.replies import NOT_FOUND as NOT_FOUND
from cmdstalk_py.server.replies import NOT_IGNORED as NOT_IGNORED
from cmdstalk_py.server.replies import OUT_OF_MEMORY as OUT_OF_MEMORY
from cmdstalk_py.server.replies import PAUSED as PAUSED
from cmdstalk_py.server.replies import RELEASED as RELEASED
from cmdstalk_py.server.replies import REPLIES as REPLIES
from cmdstalk_py.server.replies import TIMED_OUT as TIMED_OUT
from cmdstalk_py.server.replies import TOUCHED as TOUCHED
from cmdstalk_py.server.replies import UNKNOWN_COMMAND as UNKNOWN_COMMAND
from cmdstalk_py.server.replies import render_buried_id as render_buried_id
from cmdstalk_py.server.replies import render_found as render_found
from cmdstalk_py.server.replies import render_inserted as render_inserted
from cmdstalk_py.server.replies import render_job as render_job
from cmdstalk_py.server.replies import render_kicked as render_kicked
from cmdstalk_py.server.replies import render_ok as render_ok
from cmdstalk_py.server.replies import render_reserved as render_reserved
from cmdstalk_py.server.replies import render_using as render_using
from cmdstalk_py.server.replies import render_watching as render_watching
from cmdstalk_py.server.replies import render_yaml_list as render_yaml_list
from cmdstalk_py.server.scan import U32_MAX as U32_MAX
from cmdstalk_py.server.scan import U64_MAX as U64_MAX
from cmdstalk_py.server.scan import c_strtol as c_strtol
from cmdstalk_py.server.scan import fast_numbers as _fast_numbers
from cmdstalk_py.server.scan import read_numbers as read_numbers
from cmdstalk_py.server.scan import read_numbers_open as read_numbers_open
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

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    #: A parser gets the whole line, where its arguments start, and the ``-z`` limit.
    Parser = Callable[[bytes, int, int], Command]
    #: A fast path gets what follows the first word; None: the general route decides.
    _FastParser = Callable[[bytes, int], Command | None]

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

REJECT_BAD_FORMAT = Rejected(BAD_FORMAT)
REJECT_UNKNOWN = Rejected(UNKNOWN_COMMAND)

# --------------------------------------------------------------------------------------
# The tube-name rule.
# --------------------------------------------------------------------------------------

# The project's one rule (``cmdstalk_py.client.names``, stdlib only): the supervisor's options
# and the Spark tools check names with the same code.
NAME_CHARS = TUBE_NAME_CHARS
valid_name = is_tube_name
_SPACE = 0x20


# --------------------------------------------------------------------------------------
# Command lines (1.12's dispatch_cmd, without the state changes).
# --------------------------------------------------------------------------------------


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


# Fast paths for the commonest well-formed lines, by first word: plain decimal numbers
# (digits only, one space apart, short enough to need no overflow check beyond u32 for
# put); anything else they leave (None) to the general route, which gives the same answer
# for these lines too (checked in the tests).
_new = tuple.__new__


def _fast_put(rest: bytes, max_job_size: int) -> Command | None:
    args = rest.split(b" ")
    if len(args) != 4 or not b"".join(args).isdigit():
        return None
    a, b, c, d = args
    if not (0 < len(a) <= 10 and 0 < len(b) <= 10 and 0 < len(c) <= 10 and 0 < len(d) <= 10):
        return None
    pri, delay, ttr, size = int(a), int(b), int(c), int(d)
    if pri > U32_MAX or delay > U32_MAX or ttr > U32_MAX or size > U32_MAX:
        return REJECT_BAD_FORMAT
    if size > max_job_size:
        return Rejected(JOB_TOO_BIG, "put", size + 2)
    return _new(Put, (pri, delay, ttr, size))


def _fast_id(cls: type) -> _FastParser:
    def parse(rest: bytes, max_job_size: int) -> Command | None:
        # 19 digits always fit in a u64.
        if rest.isdigit() and len(rest) <= 19:
            return _new(cls, (int(rest),))
        return None

    return parse


def _fast_rwt(rest: bytes, max_job_size: int) -> Command | None:
    if rest.isdigit() and len(rest) <= 9:
        return _new(Reserve, (int(rest), True))
    return None


_FAST: dict[bytes, _FastParser] = {
    b"put": _fast_put,
    b"reserve-with-timeout": _fast_rwt,
    **{word: _fast_id(cls) for word, cls in (
        (b"delete", Delete), (b"touch", Touch), (b"peek", Peek), (b"reserve-job", ReserveJob),
        (b"kick-job", KickJob), (b"stats-job", StatsJob),
    )},
}


def parse_command(line: bytes, max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> Command:
    """Parse one command line (without its CRLF) into a command value.

    ``max_job_size`` decides JOB_TOO_BIG for ``put``. Errors come back as
    :class:`Rejected`; nothing raises.
    """
    exact = _EXACT_LINES.get(line)
    if exact is not None:
        return exact
    word, _, rest = line.partition(b" ")
    fast = _FAST.get(word)
    if fast is not None:
        cmd = fast(rest, max_job_size)
        if cmd is not None:
            return cmd
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
