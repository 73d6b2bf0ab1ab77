"""One server per binlog directory: an exclusive lock on ``DIR/lock``.

The lock is held for as long as the descriptor stays open, and the kernel drops it when the
process dies, so a crashed server never leaves a stale lock. The holder writes its pid into
the file so a second opener can say who holds it.
"""

from __future__ import annotations

import contextlib
import os

from cmdstalk_py.server.binlog.errors import BinlogError, BinlogLockedError, describe_oserror
from cmdstalk_py.server.binlog.fsops import FileOps

LOCK_NAME = "lock"


class DirLock:
    """The held lock of one binlog directory; ``release()`` (or process exit) frees it."""

    def __init__(self, ops: FileOps, directory: str, fd: int) -> None:
        self._ops = ops
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, ops: FileOps, directory: str) -> DirLock:
        """Lock ``directory`` or raise BinlogLockedError naming the holder's pid."""
        path = os.path.join(directory, LOCK_NAME)
        try:
            fd = ops.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BinlogError(describe_oserror("cannot open lock file", path, exc)) from exc
        try:
            ops.lock(fd)
        except BlockingIOError:
            ops.close(fd)
            raise BinlogLockedError(directory, _holder_pid(ops, path)) from None
        except OSError as exc:
            ops.close(fd)
            raise BinlogError(describe_oserror("cannot lock", path, exc)) from exc
        # The pid is informative only: failing to record it must not stop the server.
        with contextlib.suppress(OSError):
            ops.truncate(fd, 0)
            ops.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(ops, directory, fd)

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._ops.close(fd)


def _holder_pid(ops: FileOps, path: str) -> int | None:
    try:
        text = ops.read(path).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
