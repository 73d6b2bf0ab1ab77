"""Number scanning as beanstalkd 1.12 does it: its read_u32/read_u64, C strtol/strtoul.

Pure functions on command-line bytes, used by the parser in
:mod:`cmdstalk_py.server.protocol` (which re-exports them).
"""

from __future__ import annotations

U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF

_DIGITS = frozenset(b"0123456789")
# C isspace() in the "C" locale, skipped by strtol/strtoul.
_C_SPACE = frozenset(b" \t\n\v\f\r")
_SPACE = 0x20
_MINUS = 0x2D
_PLUS = 0x2B


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


def fast_numbers(rest: bytes, count: int, limit: int) -> list[int] | None:
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

