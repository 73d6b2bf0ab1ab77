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

Each limited run gets a cgroup (``for_run``; ``jobcgroup.py``) ``cmdstalk-<supervisor
pid>-<n>`` beside (v1: below) the supervisor's, with ``memory.max`` /
``memory.limit_in_bytes`` (and no swap beyond it, where the kernel accounts swap) and
``pids.max``; the command joins it before it runs its
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

import itertools
import os
import re
from pathlib import Path
from typing import NamedTuple

from cmdstalk_py.loop.futures import CancelledError, Future
from cmdstalk_py.loop.tools import shield
from cmdstalk_py.process.jobcgroup import JobCgroup, read_file, write_file
from cmdstalk_py.process.kill import in_pool
from cmdstalk_py.process.usage import Limits

_NAME = re.compile(r"cmdstalk-(\d+)-\d+\Z")
_V1 = ("memory", "pids", "cpuacct")
_V2 = ("memory", "pids")
_LEAF = "supervisor"  # v2: where the supervisor's own processes go


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
        return set(read_file(directory / f"cgroup.{which}").split())
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
                write_file(directory / "cgroup.subtree_control", " ".join(f"+{c}" for c in _V2))
        return self._remove_stale()

    def _remove_stale(self) -> int:
        stale: set[str] = set()
        for directory in self.dirs.values():
            for entry in directory.iterdir():
                match = _NAME.match(entry.name)
                if match and entry.is_dir() and not _alive(int(match[1])):
                    stale.add(entry.name)
        for name in stale:
            JobCgroup(self.version, self.dirs, name).remove()
        return len(stale)

    def create(self, limits: Limits) -> JobCgroup:
        """A new job cgroup with ``limits`` set (raises OSError; nothing is left then)."""
        job = JobCgroup(self.version, self.dirs, f"cmdstalk-{os.getpid()}-{next(self._seq)}")
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
    others = [p for p in read_file(directory / "cgroup.procs").split() if p != str(os.getpid())]
    if others:
        raise Unusable(
            f"{directory} holds {len(others)} process(es) besides cmdstalk: give it a cgroup "
            "of its own (systemd: Delegate=yes)"
        )
    leaf = directory / _LEAF
    leaf.mkdir(exist_ok=True)
    write_file(leaf / "cgroup.procs", str(os.getpid()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        hierarchy = detect(
            read_file(Path("/proc/self/cgroup")), read_file(Path("/proc/self/mountinfo"))
        )
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


async def for_run(limits: Limits | None) -> JobCgroup | None:
    """A cgroup for a limited run, where the supervisor manages them; else None (also
    when it cannot be made: the run is sampled from /proc, as without cgroups)."""
    hierarchy = _active
    if hierarchy is None or limits is None or not limits.any:
        return None
    future = in_pool(hierarchy.create, limits)
    try:
        return await shield(future)
    except OSError:
        return None
    except CancelledError:
        # Made all the same: removed once it is.
        future.add_done_callback(_remove_made)
        raise


def _remove_made(future: Future[JobCgroup]) -> None:
    if not future.cancelled() and future.exception() is None:
        in_pool(future.result().remove)
