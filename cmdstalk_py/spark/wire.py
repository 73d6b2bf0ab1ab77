"""What the Spark tools add to the client package: the checks of the numbers a ``put``
carries, and the request itself.

Reply words, exceptions, parsers, the tube-name rule, the address parser and the connection
are the client package's (``cmdstalk_py.client``); nothing here needs Spark.
"""

from __future__ import annotations

MAX_U32 = 2**32 - 1


def check_u32(name: str, value: int) -> int:
    """``value`` if it fits the protocol's unsigned 32-bit fields, else ValueError."""
    if not 0 <= value <= MAX_U32:
        raise ValueError(f"{name} {value} is outside 0..{MAX_U32}")
    return value


def put_command(priority: int, delay: int, ttr: int, body: bytes) -> bytes:
    """The complete ``put`` request for one job (command line, body, CRLF)."""
    return b"put %d %d %d %d\r\n%s\r\n" % (priority, delay, ttr, len(body), body)
