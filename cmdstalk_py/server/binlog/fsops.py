"""The file operations the binlog performs, behind one injectable object.

The binlog never calls ``os`` for its files directly: it takes a ``FileOps`` from its
caller (``RealFileOps`` by default). Tests pass a wrapper that fails chosen operations
(ENOSPC, EIO, short writes) or raises a crash at the Nth step, then reopen the directory
from whatever is on disk. Every operation that changes the disk or makes a change durable
is one method here, so "crash after step N" covers every step.
"""

from __future__ import annotations

import fcntl
import os
from typing import Protocol


class FileOps(Protocol):
    """File operations used by the binlog (paths are ``str``, descriptors ``int``)."""

    def makedirs(self, path: str) -> None:
        """Create ``path`` and its parents if missing."""

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path``."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        """``os.open``."""

    def close(self, fd: int) -> None:
        """``os.close``."""

    def read(self, path: str) -> bytes:
        """The whole content of ``path``."""

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset``; returns the count written (may be short)."""

    def fdatasync(self, fd: int) -> None:
        """Make the data (and size) of ``fd`` durable."""

    def truncate(self, fd: int, length: int) -> None:
        """``os.ftruncate``."""

    def unlink(self, path: str) -> None:
        """``os.unlink``."""

    def fsync_dir(self, path: str) -> None:
        """Make creations and removals of names in directory ``path`` durable."""

    def lock(self, fd: int) -> None:
        """Take an exclusive, non-blocking lock on ``fd``; BlockingIOError if held."""


class RealFileOps:
    """``FileOps`` on the real file system."""

    def makedirs(self, path: str) -> None:
        """Create ``path`` and its parents if missing."""
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path``."""
        return os.listdir(path)

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        """``os.open`` (close-on-exec, so children of the server never inherit a segment)."""
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def close(self, fd: int) -> None:
        """``os.close``."""
        os.close(fd)

    def read(self, path: str) -> bytes:
        """The whole content of ``path``, in one read for large files."""
        with open(path, "rb", buffering=0) as f:
            return f.read()

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        """``os.pwrite``."""
        return os.pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        """``os.fdatasync`` (also flushes a changed file size, which is all we need)."""
        os.fdatasync(fd)

    def truncate(self, fd: int, length: int) -> None:
        """``os.ftruncate``."""
        os.ftruncate(fd, length)

    def unlink(self, path: str) -> None:
        """``os.unlink``."""
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        """fsync the directory itself, so new and removed names survive a power loss."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, fd: int) -> None:
        """``flock`` exclusive, non-blocking.

        flock rather than POSIX ``lockf``: its lock belongs to the open file, so reading the
        holder's pid through another descriptor (or a second binlog opened in the same
        process) cannot silently drop it, as closing any descriptor drops a POSIX lock.
        """
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
