"""Per-job cgroups: hard limits and exact figures, where the supervisor may manage a cgroup.

At start-up ``configure`` decides what limits run on (``--limits-via``): a ``Hierarchy``
the supervisor may create cgroups in, or nothing (then ``usage.py`` samples /proc).

- cgroup v2: our cgroup (``/proc/self/cgroup``'s ``0::`` line) is writable and offers the
  ``memory`` and ``pids`` controllers (``cgroup.controllers``): a systemd service with
  ``Delegate=yes``. v2 allows no process in a cgroup whose controllers are enabled for its
  children, so the supervisor first moves itself into a leaf child ``supervisor/`` (as a
  delegated service manager does), then enables the controllers; a cgroup that also holds
  other processes is not its own, and is not used.
- cgroup v1: writable ``memory``, ``pids`` and ``cpuacct`` hierarchies at our own cgroups.

Each limited run gets a cgroup ``cmdstalk-<supervisor pid>-<n>`` beside (v1: below) the
supervisor's, with ``memory.max`` / ``memory.limit_in_bytes`` (and no swap beyond it, where
the kernel accounts swap) and ``pids.max``; the command joins it before it runs its
program (``joining``: ``/bin/sh`` writes itself into ``cgroup.procs``, then execs the
command), so nothing it starts is ever outside it. The kernel enforces memory (its OOM
killer kills in the cgroup) and processes (``fork`` fails); a sample (``usage.py``'s
interval) reads the OOM kills, the refused forks and the CPU counter, and over a limit the
run kills the tree as at a deadline. At the end, whatever is still in the cgroup gets
SIGKILL, the exact figures are read (peak memory, CPU of every process that ever was in
it) and the cgroup is removed. Cgroups of ours left by a supervisor that was killed (its
pid gone) are removed at the next start.

Everything that touches the cgroup filesystem runs in ``kill.py``'s pool: the files are
fast, but a removal or a kill may wait. ``detect`` and the parsers are pure functions of
the text of ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` and a root directory.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from cmdstalk_py.process.usage import Limits

#: ``--limits-via`` values.
MODES = ("auto", "cgroup", "proc")
_NAME = re.compile(r"cmdstalk-(\d+)-\d+\Z")
_V1 = ("memory", "pids", "cpuacct")
_V2 = ("memory", "pids")
_LEAF = "supervisor"  # v2: where the supervisor's own processes go
# Removing a cgroup: SIGKILL rounds over its members, then rmdir attempts, this far apart.
_ROUNDS = 200
_ROUND_WAIT = 0.005


class Unusable(Exception):
    """No cgroup the supervisor may manage; the message says why, in one line."""


class Mount(NamedTuple):
    point: str  # where it is mounted
    root: str  # the directory of the hierarchy mounted there
    fstype: str  # cgroup or cgroup2
    options: frozenset[str]  # its super options: the v1 controllers


def parse_self_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: controller -> our cgroup's path (v2's under ``""``)."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of ``/proc/self/mountinfo``."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(tail[2].split(","))
        mounts.append(Mount(_unescape(fields[4]), _unescape(fields[3]), tail[0], options))
    return mounts


def _directory(mount: Mount, path: str, root: Path) -> Path:
    """Our cgroup ``path`` in ``mount``, under ``root`` (``/``; a test's tree)."""
    if mount.root != "/":
        if path != mount.root and not path.startswith(mount.root + "/"):
            raise Unusable(f"our cgroup {path} is outside the mounted {mount.root}")
        path = path[len(mount.root) :] or "/"
    return root / mount.point.lstrip("/") / path.lstrip("/")


def _writable(directory: Path) -> bool:
    return directory.is_dir() and os.access(directory, os.W_OK)


def _read(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def detect(self_cgroup: str, mountinfo: str, root: Path = Path("/")) -> Hierarchy:
    """The hierarchy the supervisor may manage, v2 before v1; ``Unusable`` says why none."""
    paths = parse_self_cgroup(self_cgroup)
    mounts = parse_mountinfo(mountinfo)
    why: list[str] = []
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    if v2 and "" in paths:
        try:
            return _detect_v2(_directory(v2[0], paths[""], root))
        except Unusable as e:
            why.append(f"v2: {e}")
    try:
        return _detect_v1(paths, mounts, root)
    except Unusable as e:
        why.append(f"v1: {e}")
    raise Unusable("; ".join(why))


def _detect_v2(directory: Path) -> Hierarchy:
    # Restarted inside the leaf a previous run made: the delegated cgroup is its parent.
    if directory.name == _LEAF and set(_V2) <= _controllers(directory.parent, "subtree_control"):
        directory = directory.parent
    missing = [c for c in _V2 if c not in _controllers(directory, "controllers")]
    if missing:
        raise Unusable(f"{directory} does not offer {' '.join(missing)} (not delegated)")
    if not _writable(directory) or not os.access(directory / "cgroup.subtree_control", os.W_OK):
        raise Unusable(f"{directory} is not writable")
    return Hierarchy(2, {"": directory})


def _controllers(directory: Path, which: str) -> set[str]:
    try:
        return set(_read(directory / f"cgroup.{which}").split())
    except OSError:
        return set()


def _detect_v1(paths: dict[str, str], mounts: list[Mount], root: Path) -> Hierarchy:
    dirs: dict[str, Path] = {}
    for name in _V1:
        mount = next((m for m in mounts if m.fstype == "cgroup" and name in m.options), None)
        if mount is None or name not in paths:
            raise Unusable(f"no {name} hierarchy")
        directory = _directory(mount, paths[name], root)
        if not _writable(directory):
            raise Unusable(f"{directory} is not writable")
        dirs[name] = directory
    return Hierarchy(1, dirs)


@dataclass(frozen=True)
class Figures:
    """What a job's cgroup says about its processes, every one that ever was in it."""

    memory: int  # bytes charged now
    peak_memory: int  # the highest charge (the kernel's; else the highest sample's)
    cpu_s: float  # user + system
    oom_kills: int  # processes the kernel's OOM killer killed in it
    refused_forks: int  # forks refused at pids.max
    members: tuple[int, ...]  # its processes now


class Hierarchy:
    """The cgroups the supervisor manages: ``dirs`` maps a v1 controller (v2: ``""``) to
    the cgroup the job cgroups go under. Made by ``detect``; used from the pool."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self._seq = itertools.count(1)

    def describe(self) -> str:
        where = ", ".join(str(d) for d in self.dirs.values())
        return f"cgroup v{self.version} under {where}"

    def prepare(self) -> int:
        """At start-up: v2's leaf and controllers; remove our stale cgroups (how many)."""
        if self.version == 2:
            directory = self.dirs[""]
            if not set(_V2) <= _controllers(directory, "subtree_control"):
                # Only the root cgroup (no cgroup.type) may hold processes beside children.
                if (directory / "cgroup.type").exists():
                    _move_to_leaf(directory)
                _write(directory / "cgroup.subtree_control", " ".join(f"+{c}" for c in _V2))
        return self._remove_stale()

    def _remove_stale(self) -> int:
        stale: set[str] = set()
        for directory in self.dirs.values():
            for entry in directory.iterdir():
                match = _NAME.match(entry.name)
                if match and entry.is_dir() and not _alive(int(match[1])):
                    stale.add(entry.name)
        for name in stale:
            JobCgroup(self, name).remove()
        return len(stale)

    def create(self, limits: Limits) -> JobCgroup:
        """A new job cgroup with ``limits`` set (raises OSError; nothing is left then)."""
        job = JobCgroup(self, f"cmdstalk-{os.getpid()}-{next(self._seq)}")
        try:
            for directory in job.dirs.values():
                directory.mkdir()
            job.set_limits(limits)
        except OSError:
            job.remove()
            raise
        return job


def _move_to_leaf(directory: Path) -> None:
    """Move this process into ``directory``'s leaf ``supervisor/``: a cgroup of its own
    (delegated), which holds nothing else; else ``Unusable``."""
    others = [p for p in _read(directory / "cgroup.procs").split() if p != str(os.getpid())]
    if others:
        raise Unusable(
            f"{directory} holds {len(others)} process(es) besides cmdstalk: give it a cgroup "
            "of its own (systemd: Delegate=yes)"
        )
    leaf = directory / _LEAF
    leaf.mkdir(exist_ok=True)
    _write(leaf / "cgroup.procs", str(os.getpid()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobCgroup:
    """One run's cgroup (a directory per v1 hierarchy). Its methods block: call them in
    the pool."""

    def __init__(self, hierarchy: Hierarchy, name: str) -> None:
        self.version = hierarchy.version
        self.name = name
        self.dirs = {c: d / name for c, d in hierarchy.dirs.items()}
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
        _write(path, str(value))

    def members(self) -> list[int]:
        """The processes in it now (v1: its memory cgroup's; every hierarchy has them all)."""
        try:
            text = _read(self._file("memory", "cgroup.procs"))
        except FileNotFoundError:
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
            _write(self._file("", "cgroup.kill"), "1")  # the kernel kills them all, forks too
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
        text = _read(path).strip()
    except FileNotFoundError:
        if missing is None:
            raise
        return missing
    return int(text) if text.isdigit() else 0  # "max": no number


def _keyed(path: Path, key: str) -> int:
    """The value of ``key`` in a ``key value`` file (0 where the kernel has no such line)."""
    try:
        text = _read(path)
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


# -- the supervisor's choice -------------------------------------------------------------

_active: Hierarchy | None = None


def active() -> Hierarchy | None:
    """The hierarchy limited runs get their cgroup in; None: they are sampled from /proc."""
    return _active


def configure(mode: str) -> str:
    """Choose the mechanism of limits for this process (``MODES``); the line to log.

    ``cgroup`` without a usable hierarchy raises ``Unusable``; ``auto`` falls back to /proc.
    """
    global _active
    _active = None
    if mode == "proc":
        return "limits: sampled from /proc (--limits-via proc)"
    try:
        hierarchy = detect(_read(Path("/proc/self/cgroup")), _read(Path("/proc/self/mountinfo")))
        stale = hierarchy.prepare()
    except OSError as e:
        if mode == "cgroup":
            raise Unusable(f"cannot set up the cgroup: {e}") from None
        return f"limits: sampled from /proc (cannot set up a cgroup: {e})"
    except Unusable as e:
        if mode == "cgroup":
            raise
        return f"limits: sampled from /proc (no cgroup to manage: {e})"
    _active = hierarchy
    removed = f"; removed {stale} stale job cgroup(s)" if stale else ""
    return f"limits: a cgroup per limited job, {hierarchy.describe()}{removed}"
