"""One limited run's cgroup (``JobCgroup``): made with its limits, joined by the command
before its program starts (``joining``), read (``Figures``), emptied and removed.

Which hierarchy it lives in and when a run gets one is ``cgroup.py``'s. Every method here
touches the cgroup filesystem and may wait (a removal, a kill): call them in ``kill.py``'s
pool.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cmdstalk_py.process.usage import Limits

# Removing a cgroup: SIGKILL rounds over its members, then rmdir attempts, this far apart.
_ROUNDS = 200
_ROUND_WAIT = 0.005


def read_file(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def write_file(path: Path, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


@dataclass(frozen=True)
class Figures:
    """What a job's cgroup says about its processes, every one that ever was in it."""

    memory: int  # bytes charged now
    peak_memory: int  # the highest charge (the kernel's; else the highest sample's)
    cpu_s: float  # user + system
    oom_kills: int  # processes the kernel's OOM killer killed in it
    refused_forks: int  # forks refused at pids.max
    members: tuple[int, ...]  # its processes now


class JobCgroup:
    """One run's cgroup (a directory per v1 hierarchy). Its methods block: call them in
    the pool."""

    def __init__(self, version: int, parents: dict[str, Path], name: str) -> None:
        self.version = version
        self.name = name
        self.dirs = {c: d / name for c, d in parents.items()}
        self.sampled_peak = 0  # the highest charge sampled (v2 kernels without memory.peak)

    def _file(self, controller: str, name: str) -> Path:
        return self.dirs["" if self.version == 2 else controller] / name

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` a process writes itself into to join every hierarchy."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs.values())

    def set_limits(self, limits: Limits) -> None:
        if limits.memory is not None:
            if self.version == 2:
                self._set("memory", "memory.max", limits.memory)
                self._set("memory", "memory.swap.max", 0, optional=True)
            else:
                self._set("memory", "memory.limit_in_bytes", limits.memory)
                # Memory + swap: without it, a job past its limit would swap, not die.
                self._set("memory", "memory.memsw.limit_in_bytes", limits.memory, optional=True)
        if limits.procs is not None:
            self._set("pids", "pids.max", limits.procs)

    def _set(self, controller: str, name: str, value: int, optional: bool = False) -> None:
        path = self._file(controller, name)
        if optional and not path.exists():
            return  # the kernel does not account swap
        write_file(path, str(value))

    def members(self) -> list[int]:
        """The processes in it now (v1: its memory cgroup's; every hierarchy has them all)."""
        try:
            text = read_file(self._file("memory", "cgroup.procs"))
        except OSError:  # removed; or unreadable: nothing to signal, figures say the rest
            return []
        return [int(pid) for pid in text.split()]

    def figures(self) -> Figures:
        """Read its counters (raises OSError if it is gone)."""
        if self.version == 2:
            memory = _number(self._file("memory", "memory.current"))
            peak = _number(self._file("memory", "memory.peak"), missing=0)
            cpu = _keyed(self._file("", "cpu.stat"), "usage_usec") / 1e6
            oom = _keyed(self._file("memory", "memory.events"), "oom_kill")
        else:
            memory = _number(self._file("memory", "memory.usage_in_bytes"))
            peak = _number(self._file("memory", "memory.max_usage_in_bytes"))
            cpu = _number(self._file("cpuacct", "cpuacct.usage")) / 1e9
            oom = _keyed(self._file("memory", "memory.oom_control"), "oom_kill")
        self.sampled_peak = max(self.sampled_peak, memory)
        refused = _keyed(self._file("pids", "pids.events"), "max")
        peak = max(peak, self.sampled_peak)
        return Figures(memory, peak, cpu, oom, refused, tuple(self.members()))

    def kill_all(self) -> None:
        """SIGKILL every member until none is left (bounded: a member that cannot die, in
        uninterruptible sleep, keeps the cgroup, which the next start removes)."""
        if self.version == 2 and self._file("", "cgroup.kill").exists():
            write_file(self._file("", "cgroup.kill"), "1")  # the kernel kills them all, forks too
        for _ in range(_ROUNDS):
            members = self.members()
            if not members:
                return
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(_ROUND_WAIT)

    def finish(self) -> Figures | None:
        """The end of the run: kill what is left, read the figures, remove it."""
        self.kill_all()
        try:
            figures: Figures | None = self.figures()
        except OSError:
            figures = None
        self.remove()
        return figures

    def remove(self) -> None:
        """Kill what is left and remove every directory of it (those that exist)."""
        self.kill_all()
        for directory in self.dirs.values():
            for _ in range(_ROUNDS):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    # EBUSY: a member is still exiting.
                    if e.errno != errno.EBUSY:
                        break
                    time.sleep(_ROUND_WAIT)


def _number(path: Path, missing: int | None = None) -> int:
    try:
        text = read_file(path).strip()
    except FileNotFoundError:
        if missing is None:
            raise
        return missing
    return int(text) if text.isdigit() else 0  # "max": no number


def _keyed(path: Path, key: str) -> int:
    """The value of ``key`` in a ``key value`` file (0 where the kernel has no such line)."""
    try:
        text = read_file(path)
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def joining(files: Sequence[str], argv: Sequence[str]) -> list[str]:
    """``argv`` run by a shell that first writes itself into each of ``files``: the
    command's program starts inside the cgroup, and so does everything it starts.

    The program is looked up first, with the supervisor's PATH as ``posix_spawnp`` does,
    so that a missing one is still the spawn's ``OSError``, not the shell's exit 127.
    """
    if not argv:
        raise ValueError("empty command")
    program = argv[0]
    if "/" not in program:
        if shutil.which(program) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    elif not os.access(program, os.X_OK):
        code = errno.EACCES if os.path.exists(program) else errno.ENOENT
        raise OSError(code, os.strerror(code), program)
    moves = " && ".join(f"echo 0 >{shlex.quote(f)}" for f in files)
    # Exit 125 if a move fails: the command never runs outside its cgroup.
    return ["/bin/sh", "-c", f'{{ {moves}; }} || exit 125; exec "$@"', "cmdstalk", *argv]
