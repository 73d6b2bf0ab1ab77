"""``Escalation``: when a running command gets which signal (the run's kill states).

    COMMAND RUNNING -> SCANNING -> TERM SENT -> KILL SENT

A kill point (the lease's deadline, ``stop``, ``stop_now``) starts a scan of the command's
process tree and the first signal follows it: scanned before any signal, the tree is
whole; once signalled, parents die and the children that left the group drop out of it.
A slow /proc must not hold the kill, though: after ``SCAN_WAIT`` the signal goes out all
the same and what the scan finds later gets it then (``TreeKiller.scan``). SIGKILL
follows SIGTERM after the grace period, or at once on ``stop_now``. The process's exit is
not a state: it may come in any of them; after it, ``TreeKiller.finish`` carries on.

Owned by the run (``run.py``) on its loop: the run decides the kill point and keeps the
one timer; the escalation tells it (``changed``) when ``next_wake`` moved.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from cmdstalk_py.loop.core import Loop
from cmdstalk_py.loop.futures import Future, Task
from cmdstalk_py.loop.tools import gather, wait
from cmdstalk_py.process.kill import Members, TreeKiller
from cmdstalk_py.process.result import KillReason
from cmdstalk_py.process.switch import Switch

#: How long the first signal of a kill waits for the scan of the process tree.
SCAN_WAIT = 0.1


class KillState(enum.Enum):
    RUNNING = "command running"
    SCANNING = "kill point reached, tree scan under way"
    TERM_SENT = "SIGTERM sent"
    KILL_SENT = "SIGKILL sent"


class Escalation:
    """The kill states of the command ``pid`` (its process group), and its ``killer``
    (which also reaches the run's cgroup, ``members``, when it has one).

    ``changed`` is called whenever ``next_wake`` may have moved, ``fail`` with an
    exception a kill step raised (``on_kill``'s, say).
    """

    def __init__(
        self,
        loop: Loop,
        pid: int,
        token: str | None,
        grace: float,
        on_kill: Callable[[str], None] | None,
        changed: Callable[[], None],
        fail: Callable[[Exception], None],
        members: Members | None = None,
    ) -> None:
        self.loop = loop
        self.members = members
        self.pid = pid
        self.token = token
        self.grace = grace
        self.on_kill = on_kill
        self.changed = changed
        self.fail = fail
        self.state = KillState.RUNNING
        self.killed: KillReason | None = None
        self.killer: TreeKiller | None = None
        self.first_signal = signal.SIGTERM  # what SCANNING will send
        self.kill_at: float | None = None  # when TERM SENT escalates (loop time)
        self.reaped = False
        self.live = True  # False once the run failed or is aborting: no more signals
        self.tasks: set[Task[None]] = set()  # kill steps under way

    @property
    def sent(self) -> tuple[str, ...]:
        return tuple(self.killer.sent) if self.killer is not None else ()

    def next_wake(self) -> float | None:
        """When ``check`` must run next (None: nothing due)."""
        return self.kill_at if self.state is KillState.TERM_SENT and not self.reaped else None

    # -- the transitions ----------------------------------------------------------------

    def kill_point(self, reason: KillReason, hard: bool = False) -> None:
        """The deadline passed or ``stop`` is set (``hard``: ``stop_now``)."""
        if self.reaped or self.state is not KillState.RUNNING:
            return
        # COMMAND RUNNING -> SCANNING (the first signal follows the scan, or SCAN_WAIT)
        self.killed = reason
        self.state = KillState.SCANNING
        self.first_signal = signal.SIGKILL if hard or self.grace <= 0 else signal.SIGTERM
        self.killer = TreeKiller(self.pid, self.on_kill, self.token, members=self.members)
        self._task(self._signal_first(self.killer))

    async def _signal_first(self, killer: TreeKiller) -> None:
        scan = self._task(killer.scan())
        await wait({scan}, timeout=SCAN_WAIT)
        if self.live:
            self._send(self.first_signal)

    def escalate(self) -> None:
        """``stop_now`` is set, or the grace period is over."""
        if self.reaped:
            return  # the killer's finish() watches stop_now and kill_at from here
        if self.state is KillState.RUNNING:
            self.kill_point(KillReason.SHUTDOWN, hard=True)
        elif self.state is KillState.SCANNING:
            self.first_signal = signal.SIGKILL  # the scan is under way: it goes out next
        elif self.state is KillState.TERM_SENT:
            self._send(signal.SIGKILL)
            assert self.killer is not None
            self._task(self.killer.scan())  # children started since SIGTERM

    def check(self, now: float) -> None:
        if self.state is KillState.TERM_SENT and self.kill_at is not None and now >= self.kill_at:
            self.escalate()

    def _send(self, sig: signal.Signals) -> None:
        if sig is signal.SIGKILL:
            # SCANNING or TERM SENT -> KILL SENT
            self.state = KillState.KILL_SENT
            self.kill_at = None
        else:
            # SCANNING -> TERM SENT (SIGKILL follows at kill_at)
            self.state = KillState.TERM_SENT
            self.kill_at = self.loop.time() + self.grace
        assert self.killer is not None
        # Its on_kill may set stop_now: escalate() runs inside, on the new state.
        self.killer.send(sig)
        self.changed()

    # -- after the exit, and the end ----------------------------------------------------

    def on_reaped(self) -> None:
        self.reaped = True
        if self.killer is not None:
            self.killer.leader_reaped = True  # its pid may be reused once the group is gone

    async def finish(self, stop_now: Switch | None) -> None:
        """After the exit: let the kill steps under way end (a first signal waiting for
        its scan), then wait for the rest of the tree to go (SIGKILL at ``kill_at``)."""
        while self.tasks:
            # Forgotten here too: gather returns at once for tasks done already, before
            # their _task_done has run (a step raised: gather raises it).
            tasks = list(self.tasks)
            await gather(*tasks)
            self.tasks.difference_update(tasks)
        if self.killer is not None:
            await self.killer.finish(self.kill_at, stop_now)

    def abort(self) -> None:
        """The run failed or was cancelled: SIGKILL everything known, at once, unreported."""
        self.live = False
        killer = self.killer or TreeKiller(self.pid)
        killer.leader_reaped = self.reaped
        killer.abort()

    def close(self) -> None:
        self.live = False
        for task in self.tasks:
            task.cancel()  # a scan's pool job may finish; nobody reads it

    def _task(self, coro: Coroutine[Any, Any, None]) -> Task[None]:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: Future[None]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, Exception) and self.live:
            self.fail(exc)
