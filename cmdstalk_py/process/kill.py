"""Killing a command's process tree: its group, its descendants and every marked process.

A command runs in its own session, so ``killpg(pid, …)`` reaches everything that stayed in
its group. Descendants that called ``setsid``/``setpgid`` left that group; psutil finds
them while they are still below the command in the process tree (``scan``). Those that
also left the tree (a double fork: their parent exited) were adopted by this process, a
child subreaper; they carry the run's marker (``marker.py``) and are found by it, at each
scan and once more when everything else is gone (a process may ``setsid`` a new child
when it gets SIGTERM).

Everything here runs on the event loop except the /proc work: a scan of the process table
(psutil, the marker's ``environ`` reads) can take long on a loaded host, or hang on one
process's memory lock, and must hold neither the loop nor a kill. It runs in ``POOL``,
a small thread pool created on first use: the one place the process package uses threads.
Signals to the group (``killpg``, one system call) go out on the loop at once; signals to
the processes a scan found go out from the pool, since psutil checks each one's identity
in /proc first (so a reused pid is never hit).

Orphans are reparented to init or to the nearest child subreaper. If this process is a
subreaper (``set_child_subreaper``), the orphans become our children and are reaped here:
``waitid(P_PGID)`` for group members, ``waitpid`` for the collected descendants.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import psutil

from cmdstalk_py.loop.core import get_running_loop
from cmdstalk_py.loop.futures import Future, ensure_future
from cmdstalk_py.loop.tools import gather, sleep
from cmdstalk_py.process.marker import marked_descendants
from cmdstalk_py.process.switch import Switch

_PR_SET_CHILD_SUBREAPER = 36
#: Threads for the /proc work of every run on the loop: a few slow scans must not queue
#: the others behind them, and the bound keeps a mass kill from starting a thread per run.
POOL_WORKERS = 4
# How often a waiting killer re-checks whether the tree is gone.
_CHECK_INTERVAL = 0.01
# How often it does the expensive check that tells zombies (already dead, waiting for a
# parent that may never reap them) from live processes.
_DEEP_CHECK_INTERVAL = 0.1
# After SIGKILL, how long to wait for the tree to disappear before giving up.
_KILL_SETTLE = 2.0

_T = TypeVar("_T")
#: Lists the processes of a run's cgroup (``cgroup.JobCgroup.members``; in the pool).
Members = Callable[[], list[int]]
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(POOL_WORKERS, thread_name_prefix="cmdstalk-proc")
    return _pool


def in_pool(fn: Callable[..., _T], *args: object) -> Future[_T]:
    """Run ``fn(*args)`` in the process package's thread pool; await the result on the loop.
    Cancelled before it starts, it never runs (a kill given up sends nothing more)."""
    return get_running_loop().run_in_executor(_executor(), fn, *args)


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


# -- the /proc work (in the pool) -------------------------------------------------------


def _scan(
    leader: int | None, token: str | None, members: Members | None
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """Every descendant of the (unreaped) ``leader``; and every process marked ``token``
    or in the run's cgroup (``members``), wherever it went."""
    tree: list[psutil.Process] = []
    if leader is not None:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            tree = psutil.Process(leader).children(recursive=True)
    found = marked_descendants(token) if token is not None else []
    if members is not None:
        known = {p.pid for p in tree + found}
        for pid in members():
            if pid not in known:
                # A cgroup member is ours whatever its parent: no pid reuse can put
                # another process in the run's cgroup between the read and here.
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    found.append(psutil.Process(pid))
    return tree, found


def _signal_each(procs: Iterable[psutil.Process], sig: signal.Signals) -> None:
    # psutil refuses to signal a pid that now belongs to a different process.
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            proc.send_signal(sig)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _live_group_members(pgid: int) -> bool:
    """True if a non-zombie process is in group ``pgid`` (a full /proc scan: use sparingly)."""
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def _ours_to_reap(pgid: int, procs: list[psutil.Process]) -> bool:
    """A dead descendant whose parent is us, or is in the tree and about to hand it to
    us (a subreaper adopts it when that parent exits): keep reaping a moment longer.
    Without this a zombie reparented just after ``reap`` would be left behind.
    """
    parents = {os.getpid(), pgid, *(p.pid for p in procs)}
    for proc in procs:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() in parents:
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def _left(
    pgid: int, procs: list[psutil.Process], token: str | None, sig: signal.Signals, deep: bool
) -> tuple[bool, list[psutil.Process]]:
    """After the leader was reaped: is anything of the tree left (and what did we find)?

    Descendants alive, or dead and about to become ours to reap, count; so does the group,
    even with only zombies in it, unless ``deep``: then only a live member counts (a full
    /proc scan), since a zombie is dead already. When nothing else is left, marked
    processes not in ``procs`` (one that setsid-ed a child on SIGTERM) get ``sig``, the
    last signal sent, and are returned: they count.
    """
    ours = any(_alive(p) for p in procs) or _ours_to_reap(pgid, procs)
    if ours or (_live_group_members(pgid) if deep else group_exists(pgid)):
        return True, []
    if token is None:
        return False, []
    # A process that setsid-ed a child on SIGTERM: that child gets the signal too.
    known = {p.pid for p in procs}
    new = [p for p in marked_descendants(token) if p.pid not in known]
    _signal_each(new, sig)
    return bool(new), new


# -- the killer (on the loop) -----------------------------------------------------------


class TreeKiller:
    """Sends TERM then KILL to one command's process group and its descendants.

    ``leader`` is the command's pid (= its pgid). While the leader is unreaped its pid
    cannot be reused, so the tree below it is only scanned until the caller reaps it (and
    sets ``leader_reaped``). ``token`` is the run's marker value: processes carrying it
    are found wherever they are among our descendants; with ``members``, so are those of
    the run's cgroup. Owned by the loop: the pool gets copies and hands back what it found.
    """

    __slots__ = (
        "_descendants", "_jobs", "_on_kill", "leader_reaped", "members", "pgid", "sent", "token",
    )  # fmt: skip

    def __init__(
        self,
        leader: int,
        on_kill: Callable[[str], None] | None = None,
        token: str | None = None,
        leader_reaped: bool = False,
        members: Members | None = None,
    ) -> None:
        self.pgid = leader
        self.token = token
        self.members = members
        self.leader_reaped = leader_reaped
        self._descendants: dict[int, psutil.Process] = {}
        self._on_kill = on_kill
        self._jobs: set[Future[None]] = set()  # signals the pool is sending
        self.sent: list[str] = []

    async def scan(self) -> None:
        """Find the descendants and marked processes not yet known (in the pool); those
        found after a signal went out get the last one sent."""
        leader = None if self.leader_reaped else self.pgid
        tree, marked = await in_pool(_scan, leader, self.token, self.members)
        # Reaped during the scan: its pid may have named another process's tree by then.
        found = marked if self.leader_reaped else tree + marked
        new = [p for p in found if p.pid not in self._descendants]
        for proc in new:
            self._descendants[proc.pid] = proc
        if new and self.sent:
            self._pool_signal(new, signal.Signals[self.sent[-1]])

    def send(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the group now and to every known descendant (from the pool),
        then report it. Signals first: the kill must not wait for ``on_kill`` (logging)."""
        self.sent.append(sig.name)
        if not self.leader_reaped or group_exists(self.pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
        if self._descendants:
            self._pool_signal(list(self._descendants.values()), sig)
        if self._on_kill is not None:
            self._on_kill(sig.name)

    def abort(self) -> None:
        """SIGKILL everything known, unreported and without waiting (a run given up: its
        loop may be gone before the pool is done, so the pool does not report back)."""
        if not self.leader_reaped or group_exists(self.pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
        if self._descendants:
            _executor().submit(_signal_each, list(self._descendants.values()), signal.SIGKILL)

    def _pool_signal(self, procs: list[psutil.Process], sig: signal.Signals) -> None:
        job = in_pool(_signal_each, procs, sig)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    def reap(self) -> None:
        """Reap orphans that were reparented to us (only if we are a subreaper).

        System calls with WNOHANG only: cheap enough for the loop.
        """
        while True:
            try:
                if os.waitid(os.P_PGID, self.pgid, os.WEXITED | os.WNOHANG) is None:
                    break
            except ChildProcessError:
                break
        for pid in list(self._descendants):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

    async def finish(self, kill_at: float | None, stop_now: Switch | None = None) -> None:
        """After the leader was reaped: wait for the rest of the tree to go.

        ``kill_at`` (monotonic) is when to SIGKILL what remains after a SIGTERM (sooner if
        ``stop_now`` is set); None means SIGKILL was sent already. After SIGKILL, wait at
        most ``_KILL_SETTLE`` seconds more. Short sleeps on the loop; whatever reads /proc
        goes to the pool, only when the group is gone or a deep check is due, and runs
        beside the rounds: a slow /proc never holds the SIGKILL.
        """
        self.leader_reaped = True
        killed = kill_at is None
        start = time.monotonic()
        give_up = (kill_at or start) + _KILL_SETTLE
        next_deep = start + _DEEP_CHECK_INTERVAL
        check: Future[bool] | None = None
        try:
            while True:
                self.reap()
                now = time.monotonic()
                if check is None and (now >= next_deep or not group_exists(self.pgid)):
                    # (A group still there, zombies at least, is known without /proc.)
                    deep = now >= next_deep
                    next_deep = now + _DEEP_CHECK_INTERVAL if deep else next_deep
                    check = ensure_future(self._anything_left(deep))
                if check is not None and check.done():
                    if not check.result():
                        break
                    check = None
                if not killed and (
                    (kill_at is not None and now >= kill_at)
                    or (stop_now is not None and stop_now.is_set())
                ):
                    # TERM SENT -> KILL SENT
                    self.send(signal.SIGKILL)
                    killed = True
                    give_up = now + _KILL_SETTLE
                elif killed and now >= give_up:
                    break
                await sleep(_CHECK_INTERVAL)
        finally:
            if check is not None:
                check.cancel()  # given up: its pool job may finish, nobody reads it
        await self.settle()

    async def _anything_left(self, deep: bool) -> bool:
        sig = signal.Signals[self.sent[-1]] if self.sent else signal.SIGTERM
        procs = list(self._descendants.values())
        left, new = await in_pool(_left, self.pgid, procs, self.token, sig, deep)
        for proc in new:
            self._descendants.setdefault(proc.pid, proc)
        return left

    async def settle(self) -> None:
        """Wait until the signals handed to the pool are sent."""
        while self._jobs:
            # Forgotten here too: gather returns at once for jobs done already, before
            # their discard has run.
            jobs = list(self._jobs)
            await gather(*jobs)
            self._jobs.difference_update(jobs)
