"""``run_command``: run one job's command to completion on the calling thread.

One ``poll`` loop watches the stdin pipe (while payload is left), stdout, stderr and a
pidfd for the process itself, so the payload is written while output is read (no deadlock
at any size) and the run ends when the *process* exits, not when its pipes close (a
grandchild may hold them open). No helper threads: a broker thread drives everything.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from cmdstalk_py.process.control import CONTROL_ENV, CONTROL_FD, ControlReader
from cmdstalk_py.process.kill import TreeKiller, group_exists
from cmdstalk_py.process.lease import FixedLease, Lease
from cmdstalk_py.process.marker import MARKER, new_token
from cmdstalk_py.process.orphans import spawn_tracked, untrack
from cmdstalk_py.process.output import LineBudget, OutputStream
from cmdstalk_py.process.result import KillReason, ProcessResult
from cmdstalk_py.process.sentinel import tell_sentinel
from cmdstalk_py.process.spawn import Spawned, describe_spawn_error
from cmdstalk_py.process.stdin import PayloadWriter

# A pipe holds 64 KiB by default; one read per wakeup takes what is there.
_READ_SIZE = 65536
# After the process exited, how many more poll rounds may read output still in the pipes;
# bounds the time a surviving grandchild that keeps writing can hold us.
_DRAIN_ROUNDS = 64
_POLLIN = select.POLLIN


def run_command(
    argv: Sequence[str],
    payload: bytes,
    env: Mapping[str, str],
    *,
    deadline: float | None = None,
    grace: float = 1.0,
    tail_bytes: int = 4096,
    on_stdout_line: Callable[[bytes], None] | None = None,
    on_stderr_line: Callable[[bytes], None] | None = None,
    stop: threading.Event | None = None,
    stop_now: threading.Event | None = None,
    on_kill: Callable[[str], None] | None = None,
    on_started: Callable[[], None] | None = None,
    on_spawned: Callable[[int], None] | None = None,
    reap_group: bool = True,
    marker: bool = False,
    max_line_bytes: int = 65536,
    poll_interval: float = 0.05,
    lease: Lease | None = None,
    on_control: Callable[[bytes], None] | None = None,
    line_budget: LineBudget | None = None,
) -> ProcessResult:
    """Run ``argv`` with ``payload`` on its stdin and ``env`` as its whole environment.

    The command starts in a new session (its own process group). Its stdout and stderr
    are read as they come: the last ``tail_bytes`` of each end up in the result, and each
    line (without its newline; a line longer than ``max_line_bytes`` in pieces; a last
    line without newline at the end) goes to ``on_stdout_line`` / ``on_stderr_line``; with a
    ``line_budget`` (``output.py``), only as many as it allows, the rest counted there.

    Killing (``killed`` in the result says why): at ``deadline`` (a ``time.monotonic()``
    value) or when ``stop`` is set, SIGTERM goes to the process group and every descendant,
    SIGKILL to whatever is left ``grace`` seconds later; ``stop_now`` sends SIGKILL at once.
    ``on_kill`` is told each signal sent. Events are checked every ``poll_interval`` s.
    A ``lease`` (``lease.py``) replaces ``deadline``: a deadline that may move while the
    command runs, and timed work (``tick``) done on this thread.
    With ``on_control``, the command gets a control channel (``control.py``): a pipe on
    fd 3, named in ``CMDSTALK_CONTROL_FD``; each request line goes to ``on_control``.
    ``on_started`` is called once the command runs and a payload that fits the pipe buffer
    is written: work the caller can do while waiting for it (a broker reports the last job).
    ``on_spawned`` is told the command's pid as soon as it exists (the dashboard shows it).
    With ``reap_group``, members of the group left behind by a command that exited on its
    own are cleaned up the same way (TERM, then KILL after ``grace``).

    With ``marker``, ``CMDSTALK_RUN`` (``marker.py``) joins the environment and kills also
    reach processes that left the group and the tree (a double fork adopted by this process,
    a child subreaper). A sentinel (``start_sentinel``) kills the command if we die.

    A command that cannot be started gives a result with ``spawn_error`` set; this function
    does not raise for that. If a line callback raises, the command is killed, reaped and
    the exception propagates.
    """
    # Built before spawning: bad arguments raise here, with no child to clean up.
    out = OutputStream(tail_bytes, on_stdout_line, max_line_bytes, line_budget)
    err = OutputStream(tail_bytes, on_stderr_line, max_line_bytes, line_budget)
    started = time.monotonic()
    token = new_token()
    # Told before the spawn: a supervisor killed right after it still has this run guarded.
    tell_sentinel("+" + token)
    if marker or on_control is not None:
        env = {**env, MARKER: token} if marker else dict(env)
        if on_control is not None:
            env[CONTROL_ENV] = str(CONTROL_FD)
    if lease is None and deadline is not None:
        lease = FixedLease(deadline)
    try:
        child = spawn_tracked(argv, env, control=on_control is not None)
    except (OSError, ValueError) as exc:
        tell_sentinel("-" + token)
        return ProcessResult.not_started(
            describe_spawn_error(exc, argv), time.monotonic() - started
        )
    tell_sentinel(f"={token} {child.pid}")
    if on_spawned is not None:
        on_spawned(child.pid)
    run = _Run(
        child,
        token if marker else None,
        payload,
        started,
        out,
        err,
        lease,
        grace,
        stop,
        stop_now,
        on_kill,
        on_started,
        poll_interval,
        on_control,
    )
    try:
        return run.execute(reap_group)
    finally:
        run.close()
        tell_sentinel("-" + token)


class _Run:
    """State of one running command; ``execute`` is the poll loop."""

    __slots__ = (
        "control",
        "ended",
        "err",
        "grace",
        "hard",
        "kill_at",
        "killed",
        "killer",
        "lease",
        "on_kill",
        "on_started",
        "out",
        "pid",
        "pidfd",
        "poll_interval",
        "poller",
        "reaped",
        "started",
        "status",
        "stdin",
        "stop",
        "stop_now",
        "streams",
        "token",
    )

    def __init__(
        self,
        child: Spawned,
        token: str | None,
        payload: bytes,
        started: float,
        out: OutputStream,
        err: OutputStream,
        lease: Lease | None,
        grace: float,
        stop: threading.Event | None,
        stop_now: threading.Event | None,
        on_kill: Callable[[str], None] | None,
        on_started: Callable[[], None] | None,
        poll_interval: float,
        on_control: Callable[[bytes], None] | None = None,
    ) -> None:
        self.pid = child.pid
        self.token = token
        self.started = started
        self.ended = started
        self.out = out
        self.err = err
        self.streams: dict[int, OutputStream] = {child.stdout: out, child.stderr: err}
        self.poller = select.poll()
        self.stdin = PayloadWriter(child.stdin, payload, self.poller)
        self.control: ControlReader | None = None
        if on_control is not None and child.control >= 0:
            self.control = ControlReader(child.control, on_control, self.poller)
        self.lease = lease
        self.grace = grace
        self.stop = stop
        self.stop_now = stop_now
        self.on_kill = on_kill
        self.on_started = on_started
        self.poll_interval = poll_interval
        self.status: int | None = None  # raw wait status once reaped
        self.reaped = False
        self.killed: KillReason | None = None
        self.killer: TreeKiller | None = None
        self.kill_at: float | None = None  # when SIGTERM escalates to SIGKILL
        self.hard = False  # SIGKILL sent
        self.pidfd = -1  # opened in execute(), so close() cleans up if that fails

    # -- the loop ---------------------------------------------------------------------

    def execute(self, reap_group: bool) -> ProcessResult:
        poller = self.poller
        # The pidfd becomes readable when the process exits, whoever holds its pipes.
        self.pidfd = os.pidfd_open(self.pid)
        poller.register(self.pidfd, _POLLIN)
        for fd in self.streams:
            poller.register(fd, _POLLIN)
        if self.control is not None:
            self.control.start()
        self.stdin.start()
        # A deadline already past or a stop already requested acts now, not a poll later.
        self._check_kill(time.monotonic())
        if self.on_started is not None:
            # Raising here kills and reaps the command (close() in run_command).
            self.on_started()
        drain_rounds = 0
        while True:
            timeout = 0 if self.reaped else self._timeout_ms(time.monotonic())
            events = poller.poll(timeout)
            for fd, mask in events:
                if fd == self.pidfd:
                    self._reap()
                elif fd == self.stdin.fd:
                    self.stdin.write()
                elif fd in self.streams:
                    self._read(fd, mask)
                elif self.control is not None and fd == self.control.fd:
                    if mask & _POLLIN:
                        self.control.on_readable(time.monotonic())
                    else:  # hung up with nothing unread: no read needed to see the end
                        self.control.close()
            if self.reaped:
                # Take what is already in the pipes, then stop: whoever still holds them
                # open is not the command.
                if not events or not self.streams or drain_rounds >= _DRAIN_ROUNDS:
                    break
                drain_rounds += 1
            elif self.killed is None or not self.hard:
                self._check_kill(time.monotonic())
        self.out.finish()
        self.err.finish()
        if self.control is not None:
            self.control.drain()  # a last request written just before exit
        cleanup: tuple[str, ...] = ()
        if self.killer is not None:
            self.killer.finish(None if self.hard else self.kill_at, self.stop_now)
        elif reap_group and group_exists(self.pid):
            cleaner = TreeKiller(self.pid)
            cleaner.send(signal.SIGTERM)
            cleaner.finish(time.monotonic() + self.grace, self.stop_now)
            cleanup = tuple(cleaner.sent)
        return self._result(cleanup)

    def _timeout_ms(self, now: float) -> int:
        """Milliseconds until the next thing to check (-1: only I/O can wake us)."""
        wake: float | None = None
        if self.killed is None:
            if self.lease is not None:
                wake = _earliest(self.lease.deadline()[0], self.lease.next_tick())
            if self.stop is not None or self.stop_now is not None:
                wake = _earliest(wake, now + self.poll_interval)
        elif not self.hard and self.kill_at is not None:
            wake = self.kill_at
            if self.stop_now is not None:
                wake = min(wake, now + self.poll_interval)
        if self.control is not None and self.control.fd >= 0:
            wake = _earliest(wake, self.control.paused_until)
        if wake is None:
            return -1
        # Round up so we never wake a hair before the deadline and spin.
        return max(0, int((wake - now) * 1000.0) + 1)

    # -- stdout / stderr --------------------------------------------------------------

    def _read(self, fd: int, mask: int) -> None:
        # POLLHUP without POLLIN: every writer is gone and nothing is left to read (usually
        # how a command's pipes end), so the read that would return b"" is saved.
        data = os.read(fd, _READ_SIZE) if mask & _POLLIN else b""
        if data:
            self.streams[fd].feed(data)
            return
        self.poller.unregister(fd)
        del self.streams[fd]
        os.close(fd)

    # -- exit and killing -------------------------------------------------------------

    def _reap(self) -> None:
        try:
            _, self.status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            self.status = None  # someone else reaped it (a waitpid(-1) elsewhere)
        untrack(self.pid)
        self.ended = time.monotonic()
        self.reaped = True
        self.poller.unregister(self.pidfd)
        os.close(self.pidfd)
        self.pidfd = -1
        self.stdin.close()  # nobody left to read the rest of the payload

    def _check_kill(self, now: float) -> None:
        if self.control is not None:
            self.control.resume(now)
        if self.stop_now is not None and self.stop_now.is_set():
            self._escalate(KillReason.SHUTDOWN)
        elif self.killed is None:
            lease = self.lease
            if lease is not None:
                tick = lease.next_tick()
                if tick is not None and now >= tick:
                    lease.tick(now)
                deadline, reason = lease.deadline()
                if now >= deadline:
                    self._terminate(reason, now)
                    return
            if self.stop is not None and self.stop.is_set():
                self._terminate(KillReason.SHUTDOWN, now)
        elif self.kill_at is not None and now >= self.kill_at:
            self._escalate(self.killed)

    def _terminate(self, reason: KillReason, now: float) -> None:
        # COMMAND RUNNING -> TERM SENT (SIGKILL follows at kill_at)
        self.killed = reason
        self.killer = TreeKiller(self.pid, self.on_kill, self.token)
        self.killer.collect()
        if self.grace <= 0:
            self._escalate(reason)
            return
        self.killer.send(signal.SIGTERM)
        self.kill_at = now + self.grace

    def _escalate(self, reason: KillReason) -> None:
        # COMMAND RUNNING or TERM SENT -> KILL SENT
        if self.killed is None:
            self.killed = reason
        if self.killer is None:
            self.killer = TreeKiller(self.pid, self.on_kill, self.token)
        self.killer.collect()  # new children may have appeared since SIGTERM
        self.killer.send(signal.SIGKILL)
        self.hard = True

    # -- result and cleanup -----------------------------------------------------------

    def _result(self, cleanup: tuple[str, ...]) -> ProcessResult:
        status = self.status
        exit_code: int | None = None
        sig: int | None = None
        if status is not None:
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
            elif os.WIFEXITED(status):
                exit_code = os.WEXITSTATUS(status)
        return ProcessResult(
            exit_code=exit_code,
            signal=sig,
            killed=self.killed,
            duration_s=self.ended - self.started,
            stdout_tail=self.out.tail,
            stderr_tail=self.err.tail,
            spawn_error=None,
            kill_signals=tuple(self.killer.sent) if self.killer is not None else (),
            cleanup_signals=cleanup,
        )

    def close(self) -> None:
        """Release every fd; if we got here by an exception, kill and reap the command."""
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            untrack(self.pid)
            self.reaped = True
        self.stdin.close()
        if self.control is not None:
            self.control.close()
        for fd in (self.pidfd, *self.streams):
            if fd >= 0:
                os.close(fd)
        self.pidfd = -1
        self.streams.clear()


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
