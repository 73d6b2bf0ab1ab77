"""Fault injection for the binlog's FileOps: failures, crashes, and power loss.

``FaultyOps`` wraps the real file system. Every operation that changes the disk or makes
a change durable is a numbered *step*; a test can

* ``crash_at=N``: raise ``Crash`` at step N (the process "dies": every later operation
  raises too, and ``kill()`` closes its descriptors, which frees the directory lock);
* ``inject(op, errno, ...)``: fail the next matching operation(s) with an OSError, after
  writing ``partial`` bytes for a pwrite (a short write);
* ``power_cut(rng)``: after ``kill()``, make the directory look as it would after a power
  loss: file content beyond the last fdatasync is kept only as a random prefix (a torn
  write), names created or removed since the last directory fsync may or may not be.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import random
from dataclasses import dataclass

from cmdstalk_py.server.binlog.fsops import RealFileOps


class Crash(BaseException):
    """The simulated process died at an injected step (BaseException: nothing catches it)."""


@dataclass
class Injection:
    op: str
    errno: int
    times: int = 1
    path_contains: str = ""
    partial: int = 0
    after_write: bool = False  # fdatasync: the kernel dropped the unsynced pages
    short: bool = False  # pwrite: write ``partial`` bytes and report that, no error


class FaultyOps(RealFileOps):
    """RealFileOps with numbered steps, injected errors, crashes and a power-loss model."""

    def __init__(
        self, directory: str, crash_at: int | None = None, real_sync: bool = False
    ) -> None:
        self.directory = os.path.abspath(directory)
        # The power-loss model decides what survives, so the real fsync only costs time.
        self.real_sync = real_sync
        self.crash_at = crash_at
        self.steps = 0
        self.trace: list[tuple[str, str]] = []
        self.crashed = False
        self.injections: list[Injection] = []
        self.fds: dict[int, str] = {}
        self.fsyncs = 0
        # Power-loss model: what a power cut would leave, per path / per directory.
        self.durable: dict[str, bytes] = {}
        self.durable_names: set[str] = set()
        if os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                path = os.path.join(self.directory, name)
                with open(path, "rb") as f:
                    self.durable[path] = f.read()
                self.durable_names.add(name)

    # ------------------------------------------------------------ controls

    def inject(
        self,
        op: str,
        err: int = errno_mod.EIO,
        times: int = 1,
        path_contains: str = "",
        partial: int = 0,
        after_write: bool = False,
        short: bool = False,
    ) -> None:
        """Fail the next ``times`` calls of ``op`` (whose path contains ``path_contains``)."""
        self.injections.append(
            Injection(op, err, times, path_contains, partial, after_write, short)
        )

    def clear(self) -> None:
        """Remove every pending injection (the disk has space again, the error is gone)."""
        self.injections.clear()

    def kill(self) -> None:
        """The process is gone: close every descriptor it had (this drops its lock)."""
        self.crashed = True
        for fd in list(self.fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def power_cut(self, rng: random.Random) -> None:
        """Turn the directory into what a power loss could leave (call after ``kill``)."""
        names_now = set(os.listdir(self.directory))
        for name in sorted(names_now | self.durable_names):  # sorted: reproducible
            path = os.path.join(self.directory, name)
            exists = name in names_now
            in_dir = name in self.durable_names
            if exists:
                with open(path, "rb") as f:
                    current = f.read()
            synced = self.durable.get(path, b"")
            if not in_dir and rng.random() < 0.5:
                os.unlink(path)  # the new name never reached the disk
                continue
            if not exists:
                if rng.random() < 0.5:
                    continue  # the removal did reach the disk
                current = synced
            if current.startswith(synced):
                extra = current[len(synced) :]
                content = synced + extra[: rng.randint(0, len(extra))]
            elif rng.random() < 0.5:
                # Overwrites (records over preallocated zeros): the writes reached the disk
                # in order up to some point.
                same = _common_prefix(synced, current)
                cut = rng.randint(same, len(current))
                content = current[:cut] + synced[cut:]
            else:
                content = rng.choice([synced, current])
            with open(path, "wb") as f:
                f.write(content)

    # ------------------------------------------------------------ plumbing

    def _step(self, op: str, path: str) -> Injection | None:
        if self.crashed:
            raise Crash(f"already crashed ({op} {path})")
        self.steps += 1
        self.trace.append((op, os.path.basename(path)))
        if self.crash_at is not None and self.steps >= self.crash_at:
            self.crashed = True
            raise Crash(f"crash at step {self.steps}: {op} {path}")
        for inj in self.injections:
            if inj.op == op and inj.path_contains in path and inj.times > 0:
                inj.times -= 1
                return inj
        return None

    def _path(self, fd: int) -> str:
        return self.fds.get(fd, f"fd{fd}")

    # ------------------------------------------------------------ FileOps

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if flags & os.O_CREAT:
            inj = self._step("open", path)
            if inj:
                raise OSError(inj.errno, os.strerror(inj.errno), path)
        elif self.crashed:
            raise Crash("already crashed")
        fd = super().open(path, flags, mode)
        self.fds[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self.fds.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        path = self._path(fd)
        inj = self._step("pwrite", path)
        if inj:
            written = super().pwrite(fd, data[: inj.partial], offset) if inj.partial else 0
            if inj.short:
                return written
            raise OSError(inj.errno, os.strerror(inj.errno), path)
        return super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        path = self._path(fd)
        inj = self._step("fdatasync", path)
        if inj:
            if inj.after_write:
                # Linux may drop dirty pages after a failed writeback: what was not durable
                # is gone from the page cache too.
                os.ftruncate(fd, len(self.durable.get(path, b"")))
            raise OSError(inj.errno, os.strerror(inj.errno), path)
        if self.real_sync:
            super().fdatasync(fd)
        self.fsyncs += 1
        with open(path, "rb") as f:
            self.durable[path] = f.read()

    def truncate(self, fd: int, length: int) -> None:
        path = self._path(fd)
        inj = self._step("truncate", path)
        if inj:
            raise OSError(inj.errno, os.strerror(inj.errno), path)
        super().truncate(fd, length)

    def unlink(self, path: str) -> None:
        inj = self._step("unlink", path)
        if inj:
            raise OSError(inj.errno, os.strerror(inj.errno), path)
        super().unlink(path)

    def fsync_dir(self, path: str) -> None:
        inj = self._step("fsync_dir", path)
        if inj:
            raise OSError(inj.errno, os.strerror(inj.errno), path)
        if self.real_sync:
            super().fsync_dir(path)
        self.durable_names = set(os.listdir(path))

    def read(self, path: str) -> bytes:
        if self.crashed:
            raise Crash("already crashed")
        return super().read(path)


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # a[:lo] == b[:lo]; find the largest such lo by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
