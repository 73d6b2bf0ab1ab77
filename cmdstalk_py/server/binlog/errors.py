"""Exceptions raised by the binlog, and the problems recovery reports.

Every error names the directory or file it concerns so an operator can act on it without
reading code. The adapter between the server engine and the binlog maps them to replies:
``BinlogWriteError`` from a put becomes ``OUT_OF_MEMORY`` (as beanstalkd answers when it
cannot reserve binlog space), any other write or sync error ``INTERNAL_ERROR``.
"""

from __future__ import annotations

import errno as _errno
import os
from dataclasses import dataclass


class BinlogError(Exception):
    """Base class of every binlog error."""


class BinlogLockedError(BinlogError):
    """Another process holds the lock on the binlog directory."""

    def __init__(self, directory: str, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"binlog directory {directory} is locked by {holder}; "
            "only one server may use a binlog directory"
        )
        self.directory = directory
        self.pid = pid


class BinlogFormatError(BinlogError):
    """A file in the directory is not a binlog this code may read or repair.

    Raised instead of "repairing" (truncating) a file written by a newer version or by
    another program, e.g. a beanstalkd binlog: recovery never destroys what it does not
    understand.
    """


class BinlogWriteError(BinlogError):
    """A record could not be written; nothing of it is visible in the log."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    @property
    def disk_full(self) -> bool:
        """True when the cause was ENOSPC or EDQUOT (the put reply is OUT_OF_MEMORY)."""
        return self.errno in (_errno.ENOSPC, _errno.EDQUOT)


class BinlogSyncError(BinlogError):
    """fsync failed and the records since the last good sync could not be re-logged.

    They stay pending: the next ``sync()`` or ``tick()`` tries again in a fresh segment.
    """


class BinlogClosedError(BinlogError):
    """The binlog was closed (or never opened for writing)."""


def describe_oserror(action: str, path: str, exc: OSError) -> str:
    """One line naming what failed, where, and the system's reason."""
    reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    return f"{action} {path}: {reason}"


@dataclass(frozen=True, slots=True)
class Problem:
    """Something recovery found and dealt with; also logged as a warning.

    ``kind``: ``torn-tail`` (newest segment cut at ``offset``, ``size`` bytes dropped),
    ``tail-saved`` (those bytes kept in the side file ``file``), ``corrupt`` (damaged
    bytes skipped in an older segment), ``bad-header``, ``seq-gap`` (records missing
    before this point; ``detail`` says how many), ``missing`` (segment files missing in
    the middle), ``abandoned`` (a segment given up after an I/O error; what it lacks was
    re-logged), ``stale`` (records already applied were ignored), ``removed`` (an empty or
    half-created newest segment was removed).
    """

    kind: str
    file: str
    offset: int
    size: int
    detail: str

    def __str__(self) -> str:
        return f"{self.file} at offset {self.offset}: {self.kind}: {self.detail}"
