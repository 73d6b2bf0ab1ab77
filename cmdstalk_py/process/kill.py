"""Killing a command's process tree: its group, its descendants and every marked process.

A command runs in its own session, so ``killpg(pid, …)`` reaches everything that stayed in
its group. Descendants that called ``setsid``/``setpgid`` left that group; psutil finds
them while they are still below the command in the process tree, so they are collected
*before* the first signal (once signalled, parents die and the tree falls apart). Those
that also left the tree (a double fork: their parent exited) were adopted by this
process, a child subreaper; they carry the run's marker (``marker.py``) and are collected
by it, before each signal and once more when everything else is gone (a process may
``setsid`` a new child when it gets SIGTERM).

Orphans are reparented to init or to the nearest child subreaper. If this process is a
subreaper (``set_child_subreaper``), the orphans become our children and are reaped here:
``waitid(P_PGID)`` for group members, ``waitpid`` for the collected descendants.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

import psutil

from cmdstalk_py.process.marker import marked_descendants

_PR_SET_CHILD_SUBREAPER = 36
# How often a waiting killer re-checks whether the tree is gone.
_CHECK_INTERVAL = 0.01
# How often it does the expensive check that tells zombies (already dead, waiting for a
# parent that may never reap them) from live processes.
_DEEP_CHECK_INTERVAL = 0.1
# After SIGKILL, how long to wait for the tree to disappear before giving up.
_KILL_SETTLE = 2.0


def set_child_subreaper(enabled: bool = True) -> bool:
    """Make this process adopt orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    With it, killed grandchildren are reaped by ``run_command`` instead of being left to
    init (some container inits never reap, leaving zombies). Returns False where prctl is
    not available. Process-wide: call it once at startup, from the main thread.
    """
    import ctypes  # only here: the common path never needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def group_exists(pgid: int) -> bool:
    """True while any process (zombies included) is in process group ``pgid``.

    Called after the leader is reaped. The kernel keeps a pid allocated while any process
    still uses it as its group id, so ``pgid`` cannot name a newer group until this one is
    empty; every signal to the group is preceded by this check, which leaves only a
    microseconds-wide window in which the pid space would have to wrap around.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process; it exists
    return True


def _live_group_members(pgid: int) -> bool:
    """True if a non-zombie process is in group ``pgid`` (a full /proc scan: use sparingly)."""
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class TreeKiller:
    """Sends TERM then KILL to one command's process group and its descendants.

    ``leader`` is the command's pid (= its pgid). While the leader is unreaped its pid
    cannot be reused, so ``collect`` is only called before the caller reaps it. ``token``
    is the run's marker value: processes carrying it are collected wherever they are
    among our descendants.
    """

    __slots__ = ("_descendants", "_on_kill", "pgid", "sent", "token")

    def __init__(
        self,
        leader: int,
        on_kill: Callable[[str], None] | None = None,
        token: str | None = None,
    ) -> None:
        self.pgid = leader
        self.token = token
        self._descendants: dict[int, psutil.Process] = {}
        self._on_kill = on_kill
        self.sent: list[str] = []

    def collect(self) -> None:
        """Remember every current descendant of the (unreaped) leader and every marked one."""
        try:
            children = psutil.Process(self.pgid).children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            children = []
        for child in children:
            self._descendants.setdefault(child.pid, child)
        self.collect_marked()

    def collect_marked(self) -> list[psutil.Process]:
        """Add the live marked processes not yet known; return them."""
        if self.token is None:
            return []
        new = [p for p in marked_descendants(self.token) if p.pid not in self._descendants]
        for proc in new:
            self._descendants[proc.pid] = proc
        return new

    def send(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the group and to every collected descendant, then report it.

        Signals first: the kill must not wait for whatever ``on_kill`` does (logging).
        """
        self.sent.append(sig.name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)
        # psutil refuses to signal a pid that now belongs to a different process.
        for proc in self._descendants.values():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
                proc.send_signal(sig)
        if self._on_kill is not None:
            self._on_kill(sig.name)

    def reap(self) -> None:
        """Reap orphans that were reparented to us (only if we are a subreaper)."""
        while True:
            try:
                if os.waitid(os.P_PGID, self.pgid, os.WEXITED | os.WNOHANG) is None:
                    break
            except ChildProcessError:
                break
        for pid in list(self._descendants):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

    def _remaining(self) -> bool:
        """Cheap check: anything (maybe only zombies) still in the group or tree?"""
        if group_exists(self.pgid):
            return True
        return any(_alive(p) for p in self._descendants.values()) or self._ours_to_reap()

    def _live(self) -> bool:
        """Expensive check: anything that is not a zombie left?"""
        if any(_alive(p) for p in self._descendants.values()):
            return True
        return _live_group_members(self.pgid)

    def _ours_to_reap(self) -> bool:
        """A dead descendant whose parent is us, or is in the tree and about to hand it to
        us (a subreaper adopts it when that parent exits): keep reaping a moment longer.
        Without this a zombie reparented just after ``reap`` would be left behind.
        """
        parents = {os.getpid(), self.pgid, *self._descendants}
        for proc in self._descendants.values():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() in parents:
                    return True
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return False

    def finish(
        self,
        kill_at: float | None,
        stop_now: threading.Event | None = None,
    ) -> None:
        """After the leader was reaped: wait for the rest of the tree to go.

        ``kill_at`` (monotonic) is when to SIGKILL what remains after a SIGTERM (sooner if
        ``stop_now`` is set); None means SIGKILL was sent already. After SIGKILL, wait at
        most ``_KILL_SETTLE`` seconds more.
        """
        killed = kill_at is None
        now = time.monotonic()
        give_up = (kill_at or now) + _KILL_SETTLE
        next_deep = now + _DEEP_CHECK_INTERVAL
        while True:
            self.reap()
            if not self._remaining() and not self._late_marked():
                return
            now = time.monotonic()
            if now >= next_deep:
                # Only zombies left (an init that does not reap): they are dead already,
                # unless reaping them is about to become our job.
                if not self._live() and not self._ours_to_reap() and not self._late_marked():
                    return
                next_deep = now + _DEEP_CHECK_INTERVAL
            if not killed and (
                (kill_at is not None and now >= kill_at)
                or (stop_now is not None and stop_now.is_set())
            ):
                # TERM SENT -> KILL SENT
                self.collect_marked()
                self.send(signal.SIGKILL)
                killed = True
                give_up = now + _KILL_SETTLE
            elif killed and now >= give_up:
                return
            time.sleep(_CHECK_INTERVAL)

    def _late_marked(self) -> bool:
        """Marked processes that appeared after the last signal (one that ``setsid``-ed a
        child on SIGTERM): give them that signal too and keep waiting for them."""
        new = self.collect_marked()
        if not new or not self.sent:
            return bool(new)
        sig = signal.Signals[self.sent[-1]]
        for proc in new:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
                proc.send_signal(sig)
        return True
