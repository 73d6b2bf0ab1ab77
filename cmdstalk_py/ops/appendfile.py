"""``AppendFile``: a file that takes whole lines or nothing, created private, logrotate-aware.

A full disk (or any write error) must not leave half a line behind, or the next line is
glued onto it and a reader loses both: the size before the write is remembered and the
file is cut back to it when the write fails. The file is reopened on request (SIGHUP from
logrotate, acted on at the next write) and on its own when the path stops naming it
(moved, deleted or replaced); ``O_APPEND`` keeps copytruncate working.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable

# How often an append may stat() the path to notice rotation; a stat per line would be
# cheap too, but a busy pool writes hundreds of lines a second and gains nothing from it.
CHECK_INTERVAL = 1.0
# Job data (output tails, errors) is for the owner only, as with any log of job contents.
# An existing file keeps its mode: widening it is the owner's choice.
FILE_MODE = 0o600


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: a pipe or terminal may take less than asked in one call."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to the regular file ``fd`` completely or not at all; raises OSError.

    A short write (the disk filled mid-line) is followed by another write that fails; the
    file is then truncated back to where the line began.
    """
    start = os.fstat(fd).st_size
    try:
        write_all(fd, data)
    except OSError:
        with contextlib.suppress(OSError):
            # Only ever shorter: a copytruncate in between must not grow a hole of NULs.
            if os.fstat(fd).st_size > start:
                os.ftruncate(fd, start)
        raise


class AppendFile:
    """Appends whole lines to ``path``; thread-safe (one lock around each append)."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        # Set from a signal handler: a plain attribute store, no lock (the handler may run
        # while this very thread holds the lock).
        self._reopen_requested = False
        self._failed = False  # the last append failed: check the path at every append
        self._fd, self._regular = self._open()
        self._next_check = self._clock() + CHECK_INTERVAL

    def _open(self) -> tuple[int, bool]:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        fd = os.open(self.path, flags, FILE_MODE)
        # A FIFO or a device (--events /dev/stderr) cannot be cut back; it is written as is.
        return fd, stat.S_ISREG(os.fstat(fd).st_mode)

    def request_reopen(self) -> None:
        """Ask for a reopen at the next append; safe to call from a signal handler."""
        self._reopen_requested = True

    def reopen(self, timeout: float = 0.1) -> None:
        """Close and reopen the path now; raises OSError when it cannot be opened.

        If an append holds the file longer than ``timeout`` (a stalled disk), the reopen is
        left to the next append instead of waiting for it.
        """
        if not self._lock.acquire(timeout=timeout):
            self._reopen_requested = True
            return
        try:
            self._reopen_locked()
        except OSError:
            self._failed = True
            raise
        finally:
            self._lock.release()

    def _reopen_locked(self) -> None:
        self._reopen_requested = False
        if self._closed:
            return
        new_fd, regular = self._open()
        old, self._fd, self._regular = self._fd, new_fd, regular
        if old >= 0:
            os.close(old)
        self._next_check = self._clock() + CHECK_INTERVAL

    def _rotated_locked(self) -> bool:
        """Whether the path no longer names the open file (moved, deleted or replaced)."""
        if self._fd < 0:
            return True
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return True
        mine = os.fstat(self._fd)
        return (on_disk.st_ino, on_disk.st_dev) != (mine.st_ino, mine.st_dev)

    def _target_locked(self) -> int:
        """The descriptor to write to, reopening first when asked to or after rotation."""
        if self._reopen_requested:
            self._reopen_locked()
        elif self._failed or self._clock() >= self._next_check:
            self._next_check = self._clock() + CHECK_INTERVAL
            if self._rotated_locked():
                self._reopen_locked()
        return self._fd

    def append(self, line: bytes) -> None:
        """Append ``line`` whole; OSError (nothing written) on failure, ValueError once closed."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path} is closed")
            try:
                fd = self._target_locked()
                if self._regular:
                    append_whole(fd, line)
                else:
                    write_all(fd, line)
            except OSError:
                self._failed = True
                raise
            self._failed = False

    def close(self) -> None:
        """Close the file; later appends raise ValueError."""
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
