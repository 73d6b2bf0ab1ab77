"""``run_command``: run one job's command to completion on the running loop (``loop.core``).

Nothing here blocks the loop. The command's stdout, stderr and control channel and a pidfd
for the process itself are watched for input (``loop.watch``), its stdin for room to
write: the payload is written while output is read (no deadlock at any size),
and the run ends when the *process* exits, not when its pipes close (a grandchild may hold
them open). A chunk read holding many lines is handed on a turn at a time (``output.py``),
its pipe not watched until the last turn, so the loop polls between turns. One loop
timer wakes the run for the next of: the lease's deadline or tick, the SIGKILL after the
grace period, the end of the control channel's budget pause, the next sample of a limited
command's tree (``usage.py``). ``stop`` and ``stop_now`` act the moment they are set
(``switch.py``). When which signal goes out is ``escalation.py``'s; a kill's /proc work runs
in ``kill.py``'s thread pool.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import time
from collections.abc import Callable, Mapping, Sequence

from cmdstalk_py.loop.core import Loop, Timer, get_running_loop
from cmdstalk_py.loop.futures import Future
from cmdstalk_py.process import cgroup
from cmdstalk_py.process.control import CONTROL_ENV, CONTROL_FD, ControlReader
from cmdstalk_py.process.escalation import Escalation, KillState
from cmdstalk_py.process.jobcgroup import JobCgroup, joining
from cmdstalk_py.process.kill import TreeKiller, group_exists, in_pool
from cmdstalk_py.process.lease import FixedLease, Lease
from cmdstalk_py.process.marker import MARKER, new_token
from cmdstalk_py.process.orphans import spawn_tracked, untrack
from cmdstalk_py.process.output import LineBudget, OutputStream
from cmdstalk_py.process.result import KillReason, ProcessResult, Usage
from cmdstalk_py.process.sentinel import tell_sentinel
from cmdstalk_py.process.spawn import Spawned, describe_spawn_error
from cmdstalk_py.process.stdin import PayloadWriter
from cmdstalk_py.process.switch import Switch
from cmdstalk_py.process.usage import NO_LIMITS, CgroupSampler, Limits, Sampler

# A pipe holds 64 KiB by default; one read per wakeup takes what is there.
_READ_SIZE = 65536
# After the process exited, how many more rounds may read output still in the pipes;
# bounds the time a surviving grandchild that keeps writing can hold us.
_DRAIN_ROUNDS = 64


async def run_command(
    argv: Sequence[str],
    payload: bytes,
    env: Mapping[str, str],
    *,
    deadline: float | None = None,
    grace: float = 1.0,
    tail_bytes: int = 4096,
    on_stdout_line: Callable[[bytes], None] | None = None,
    on_stderr_line: Callable[[bytes], None] | None = None,
    stop: Switch | None = None,
    stop_now: Switch | None = None,
    on_kill: Callable[[str], None] | None = None,
    on_started: Callable[[], None] | None = None,
    on_spawned: Callable[[int], None] | None = None,
    reap_group: bool = True,
    marker: bool = False,
    max_line_bytes: int = 65536,
    lease: Lease | None = None,
    on_control: Callable[[bytes], None] | None = None,
    line_budget: LineBudget | None = None,
    limits: Limits | None = None,
) -> ProcessResult:
    """Run ``argv`` with ``payload`` on its stdin and ``env`` as its whole environment.

    The command starts in a new session (its own process group). Its stdout and stderr
    are read as they come: the last ``tail_bytes`` of each end up in the result, and each
    line (without its newline; a line longer than ``max_line_bytes`` in pieces; a last
    line without newline at the end) goes to ``on_stdout_line`` / ``on_stderr_line``; with a
    ``line_budget`` (``output.py``), only as many as it allows, the rest counted there.
    Every callback is called on the loop and must not block it.

    Killing (``killed`` in the result says why): at ``deadline`` (a ``time.monotonic()``
    value) or when ``stop`` is set, SIGTERM goes to the process group and every descendant,
    SIGKILL to whatever is left ``grace`` seconds later; ``stop_now`` sends SIGKILL at once.
    ``on_kill`` is told each signal sent. A ``lease`` (``lease.py``) replaces ``deadline``:
    a deadline that may move while the command runs, and timed work (``tick``).
    With ``on_control``, the command gets a control channel (``control.py``): a pipe on
    fd 3, named in ``CMDSTALK_CONTROL_FD``; each request line goes to ``on_control``.
    ``on_started`` is called once the command runs and a payload that fits the pipe buffer
    is written: work the caller can do while waiting for it (a broker reports the last job).
    ``on_spawned`` is told the command's pid as soon as it exists (the dashboard shows it).
    With ``reap_group``, members of the group left behind by a command that exited on its
    own are cleaned up the same way (TERM, then KILL after ``grace``).

    ``usage`` in the result is what the command's tree used (``usage.py``): the tree is
    sampled every ``usage.ACCOUNT_INTERVAL`` seconds, from one interval after the spawn.
    With ``limits``, every ``usage.SAMPLE_INTERVAL`` seconds from the spawn, and a tree over
    one is killed as at a deadline, ``killed`` saying which (memory, cpu, procs). Where
    the supervisor manages cgroups (``cgroup.configure``), a limited command runs in a
    cgroup of its own instead: hard limits, exact figures, and whatever is left in it at
    the end is killed.

    With ``marker``, ``CMDSTALK_RUN`` (``marker.py``) joins the environment and kills also
    reach processes that left the group and the tree (a double fork adopted by this process,
    a child subreaper). A sentinel (``start_sentinel``) kills the command if we die.

    A command that cannot be started gives a result with ``spawn_error`` set; this function
    does not raise for that. If a callback raises, or the coroutine is cancelled, the
    command is killed (SIGKILL) and reaped, every descriptor closed, and the exception
    propagates.
    """
    # Built before spawning: bad arguments raise here, with no child to clean up.
    out = OutputStream(tail_bytes, on_stdout_line, max_line_bytes, line_budget)
    err = OutputStream(tail_bytes, on_stderr_line, max_line_bytes, line_budget)
    loop = get_running_loop()
    started = time.monotonic()
    job = await cgroup.for_run(limits)
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
        spawned = argv if job is None else joining(job.procs_files, argv)
        child = spawn_tracked(spawned, env, control=on_control is not None)
    except (OSError, ValueError) as exc:
        tell_sentinel("-" + token)
        if job is not None:
            in_pool(job.remove)
        return ProcessResult.not_started(
            describe_spawn_error(exc, argv), time.monotonic() - started
        )
    tell_sentinel(f"={token} {child.pid}")
    run = _Run(loop, child, payload, started, out, err, lease)
    run.kill = Escalation(
        loop, child.pid, token if marker else None, grace, on_kill, run.rearm, run.fail,
        members=job.members if job is not None else None,
    )  # fmt: skip
    run.stop, run.stop_now, run.on_control = stop, stop_now, on_control
    run.on_spawned, run.on_started = on_spawned, on_started
    if job is not None:
        run.cgroup, run.sampler = job, CgroupSampler(job, limits or NO_LIMITS, loop.time())
    else:
        run.sampler = Sampler(child.pid, limits or NO_LIMITS, loop.time())
    try:
        return await run.execute(reap_group)
    except BaseException:
        await run.abort()
        raise
    finally:
        run.close()
        tell_sentinel("-" + token)


class _Run:
    """One running command. ``execute`` starts it and awaits ``drained``; everything in
    between happens in loop callbacks (``_on_*``), each routed through ``_safe``."""

    kill: Escalation  # set right after construction (it calls back into the run)

    def __init__(
        self,
        loop: Loop,
        child: Spawned,
        payload: bytes,
        started: float,
        out: OutputStream,
        err: OutputStream,
        lease: Lease | None,
    ) -> None:
        self.loop = loop
        self.pid = child.pid
        self.started = started
        self.ended = started
        self.out = out
        self.err = err
        self.streams: dict[int, OutputStream] = {child.stdout: out, child.stderr: err}
        self.stdin = PayloadWriter(child.stdin, payload, self._watch_stdin)
        self.control_fd = child.control
        self.control: ControlReader | None = None
        self.lease = lease
        self.stop: Switch | None = None
        self.stop_now: Switch | None = None
        self.on_spawned: Callable[[int], None] | None = None
        self.on_started: Callable[[], None] | None = None
        self.on_control: Callable[[bytes], None] | None = None
        self.status: int | None = None  # raw wait status once reaped
        self.usage = Usage()  # from the rusage once reaped
        self.sampler: Sampler | CgroupSampler | None = None  # set before execute
        self.cgroup: JobCgroup | None = None  # the run's own, until removed
        self.reaped = False
        self.pidfd = -1  # opened in _start(), so close() cleans up if that fails
        self.timer: Timer | None = None
        self.drain_rounds = 0
        self.draining = True  # after the exit: read again (no round yet, or the last found output)
        self.live = True  # False once failed, aborted or closed: no more callbacks out
        self.failure: Exception | None = None  # the first exception a callback raised
        self.exited: Future[None] = Future(loop)  # the process was reaped
        # Reaped and drained; or the exception a callback raised.
        self.drained: Future[None] = Future(loop)
        # One object each, so that the switches can forget them again.
        self.stop_cb = functools.partial(self._safe, self._on_stop)
        self.stop_now_cb = functools.partial(self._safe, self._on_stop_now)
        self.wake_cb = functools.partial(self._safe, self.rearm)

    # -- start and end ----------------------------------------------------------------

    async def execute(self, reap_group: bool) -> ProcessResult:
        self._start()
        if self.on_spawned is not None:
            self.on_spawned(self.pid)
        if self.on_started is not None:
            # Raising here (or in on_spawned) kills and reaps the command (abort()).
            self.on_started()
        await self.drained
        self.out.finish()
        self.err.finish()
        if self.control is not None:
            self.control.drain()  # a last request written just before exit
            self.control.close()
        cleanup: tuple[str, ...] = ()
        if self.kill.killed is not None:
            await self.kill.finish(self.stop_now)
        elif reap_group and group_exists(self.pid):
            cleaner = TreeKiller(self.pid, leader_reaped=True)
            cleaner.send(signal.SIGTERM)
            await cleaner.finish(time.monotonic() + self.kill.grace, self.stop_now)
            cleanup = tuple(cleaner.sent)
        if self.cgroup is not None:
            # What is left in it (a process that left the group and the tree) is killed.
            job, self.cgroup = self.cgroup, None
            figures = await in_pool(job.finish)
            assert isinstance(self.sampler, CgroupSampler)
            self.sampler.finish(figures)
        if self.failure is not None:
            raise self.failure  # from a kill step that ended after the drain
        return self._result(cleanup)

    def _start(self) -> None:
        loop = self.loop
        # The pidfd becomes readable when the process exits, whoever holds its pipes.
        self.pidfd = os.pidfd_open(self.pid)
        loop.watch(self.pidfd, select.EPOLLIN, self._on_exit)
        for fd in self.streams:
            os.set_blocking(fd, False)  # the drain rounds read without waiting
            self._watch_stream(fd)
        if self.on_control is not None and self.control_fd >= 0:
            self.control = ControlReader(self.control_fd, self.on_control, self._watch_control)
            self.control.start()
        self.stdin.start()
        if self.lease is not None:
            self.lease.attach(self.wake_cb)
        # A switch already set or a deadline already past acts now, not a loop turn later.
        if self.stop_now is not None:
            self.stop_now.add_callback(self.stop_now_cb)
        if self.stop is not None:
            self.stop.add_callback(self.stop_cb)
        self._check(loop.time())

    async def abort(self) -> None:
        """The run failed or was cancelled: SIGKILL the command's group and what we know
        of its tree, and wait for the command's exit so that it is reaped."""
        self._unwatch()
        if not self.drained.done():
            self.drained.cancel()
        self.kill.abort()
        if not self.reaped and self.pidfd >= 0:
            await self.exited  # a second cancellation here: close() leaves it to reap_orphans

    def close(self) -> None:
        """Release every fd and forget every callback (however the run ended)."""
        self._unwatch()
        self.kill.close()
        if self.sampler is not None:
            self.sampler.close()
        for switch, fn in ((self.stop, self.stop_cb), (self.stop_now, self.stop_now_cb)):
            if switch is not None:
                switch.remove_callback(fn)
        self.stdin.close()
        if self.control is not None:
            self.control.close()
        elif self.control_fd >= 0:
            os.close(self.control_fd)
        self.control_fd = -1
        for fd in self.streams:
            self.loop.unwatch(fd)
            os.close(fd)
        self.streams.clear()
        if self.pidfd >= 0:
            self.loop.unwatch(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        if not self.reaped:
            untrack(self.pid)  # not waited for to the end: reap_orphans collects it
        if self.cgroup is not None:
            in_pool(self.cgroup.remove)  # the run failed: kill what is in it, unwaited
            self.cgroup = None

    def _unwatch(self) -> None:
        """No more calls into the owner's code: no lines, requests or timed work. Only
        the process's exit is still watched."""
        self.live = False
        self._cancel_timer()
        for fd in self.streams:
            self.loop.unwatch(fd)
        if self.stdin.fd is not None:
            self.loop.unwatch(self.stdin.fd)
        if self.control is not None and self.control.fd >= 0:
            self.loop.unwatch(self.control.fd)

    # -- loop callbacks ---------------------------------------------------------------

    def _safe(self, fn: Callable[..., object], *args: object) -> None:
        """Call one of this run's loop callbacks. An exception ends the run with it (the
        coroutine kills, reaps and raises) rather than going to the loop's handler."""
        if not self.live:
            return
        try:
            fn(*args)
        except Exception as exc:
            self.fail(exc)

    def fail(self, exc: Exception) -> None:
        if self.failure is None:
            self.failure = exc
        if not self.drained.done():
            self.drained.set_exception(exc)
        self._unwatch()

    def _watch_stream(self, fd: int) -> None:
        self.loop.watch(fd, select.EPOLLIN, functools.partial(self._safe, self._read, fd))

    def _read(self, fd: int, _events: int = 0) -> bool:
        """One read from stdout or stderr (``_events``: the epoll mask, when the loop calls
        it); False if the pipe had nothing for us."""
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return False
        if data:
            if not self.streams[fd].feed(data) and not self.reaped:
                # Lines of it are left: the pipe waits until they are handed on, a turn
                # at a time, and the loop polls its other pipes and timers in between.
                self.loop.unwatch(fd)
                self._after_poll(self._more, fd)
            return True
        # End of file: every writer is gone.
        self.loop.unwatch(fd)
        del self.streams[fd]
        os.close(fd)
        return True

    def _after_poll(self, fn: Callable[..., object], *args: object) -> None:
        """Call ``fn(*args)`` (through ``_safe``) once the loop has polled again, from a
        descriptor's handler: what a handler queues runs in the same iteration (the loop's
        rule), what a callback queues in the next."""
        self.loop.call_soon(self.loop.call_soon, self._safe, fn, *args)

    def _more(self, fd: int) -> None:
        """The next turn of lines of a chunk read from ``fd``; once they are all handed on,
        the pipe is watched again."""
        if self.reaped:
            return  # the drain rounds take over
        if self.streams[fd].more():
            self._watch_stream(fd)
        else:
            self.loop.call_soon(self._safe, self._more, fd)

    def _watch_stdin(self, on: bool) -> None:
        fd = self.stdin.fd
        assert fd is not None
        if on:
            self.loop.watch(fd, select.EPOLLOUT, self._on_writable)
        else:
            self.loop.unwatch(fd)

    def _on_writable(self, _events: int) -> None:
        self._safe(self.stdin.write)

    def _watch_control(self, on: bool) -> None:
        if on:
            self.loop.watch(self.control_fd, select.EPOLLIN, self._on_control)
        else:
            self.loop.unwatch(self.control_fd)

    def _on_control(self, _events: int) -> None:
        self._safe(self._read_control)

    def _read_control(self) -> None:
        assert self.control is not None
        self.control.on_readable(self.loop.time())
        self.rearm()  # over its budget, the channel rests until paused_until

    def _on_exit(self, _events: int) -> None:
        """The pidfd is readable: the process exited. Reap it (WNOHANG: it is a zombie);
        wait4's rusage is what the command and the children it waited for used."""
        status: int | None
        try:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, None  # someone else reaped it (a waitpid(-1) elsewhere)
        else:
            self.usage = Usage.from_rusage(rusage)
        if pid == 0:
            return
        self.status = status
        untrack(self.pid)
        self.ended = time.monotonic()
        self.reaped = True
        if self.sampler is not None:
            # A sample in flight may have read /proc after the exit: the pid is not ours now.
            self.sampler.close()
        self.kill.on_reaped()
        self.exited.set_result(None)
        self.loop.unwatch(self.pidfd)
        os.close(self.pidfd)
        self.pidfd = -1
        self.stdin.close()  # nobody left to read the rest of the payload
        if not self.live:
            return  # aborting: nobody waits for the output any more
        for fd in self.streams:
            self.loop.unwatch(fd)  # the drain rounds take over
        self.rearm()
        if self.streams:
            self._after_poll(self._drain)
        elif not self.drained.done():
            self.drained.set_result(None)  # both pipes ended already: no round to drain

    def _drain(self) -> None:
        """One turn after the exit: the next lines of chunks already read, or else a round
        taking what is already in the pipes; then stop: whoever still holds them open is
        not the command. Every line read is handed on, a turn at a time."""
        busy = [stream for stream in self.streams.values() if stream.busy]
        for stream in busy:
            stream.more()
        if not busy:
            took = [self._read(fd) for fd in list(self.streams)]
            self.draining = any(took) and bool(self.streams) and self.drain_rounds < _DRAIN_ROUNDS
            self.drain_rounds += 1
        if self.draining or any(stream.busy for stream in self.streams.values()):
            self.loop.call_soon(self._safe, self._drain)
        elif not self.drained.done():
            self.drained.set_result(None)

    def _on_timer(self) -> None:
        self.timer = None
        self._check(self.loop.time())  # (the loop never runs a timer before its time)

    def _sampled(self, crossed: KillReason | None) -> None:
        """A sample of the tree is in: over a limit, kill it as at a deadline."""
        if crossed is not None and not self.reaped:
            self.kill.kill_point(crossed)
        self.rearm()

    def _on_stop(self) -> None:
        self.kill.kill_point(KillReason.SHUTDOWN)

    def _on_stop_now(self) -> None:
        self.kill.escalate()

    # -- the clock --------------------------------------------------------------------

    def _check(self, now: float) -> None:
        if self.control is not None:
            self.control.resume(now)
        lease = self.lease
        if lease is not None and not self.reaped and self.kill.state is KillState.RUNNING:
            tick = lease.next_tick()
            if tick is not None and now >= tick:
                lease.tick(now)
            deadline, reason = lease.deadline()
            if now >= deadline:
                self.kill.kill_point(reason)
        sampler = self.sampler
        if sampler is not None and self._sampling():
            due = sampler.due()
            if due is not None and now >= due:
                sampler.start(self.loop, functools.partial(self._safe, self._sampled))
        self.kill.check(now)
        self.rearm()

    def _sampling(self) -> bool:
        """Whether the tree is still sampled: until the command is reaped or a kill starts."""
        return not self.reaped and self.kill.state is KillState.RUNNING

    def rearm(self) -> None:
        """Keep the one timer at the next thing due (none: only I/O can wake us). Also
        the lease's ``wake``: a deadline moved into the past fires it in this loop turn."""
        wake = self.kill.next_wake()
        if self.lease is not None and not self.reaped and self.kill.state is KillState.RUNNING:
            wake = _earliest(self.lease.deadline()[0], self.lease.next_tick())
        if self.control is not None and self.control.fd >= 0:
            wake = _earliest(wake, self.control.paused_until)
        if self.sampler is not None and self._sampling():
            wake = _earliest(wake, self.sampler.due())
        if self.timer is not None and self.timer.when == wake:
            return
        self._cancel_timer()
        if wake is not None and self.live:
            self.timer = self.loop.call_at(wake, self._safe, self._on_timer)

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # -- the result -------------------------------------------------------------------

    def _result(self, cleanup: tuple[str, ...]) -> ProcessResult:
        status = self.status
        exit_code: int | None = None
        sig: int | None = None
        if status is not None:
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
            elif os.WIFEXITED(status):
                exit_code = os.WEXITSTATUS(status)
        killed = self.kill.killed
        if killed is None and isinstance(self.sampler, CgroupSampler):
            killed = self.sampler.bounded()  # the kernel's OOM kill, a refused fork
        return ProcessResult(
            exit_code=exit_code,
            signal=sig,
            killed=killed,
            duration_s=self.ended - self.started,
            stdout_tail=self.out.tail,
            stderr_tail=self.err.tail,
            spawn_error=None,
            kill_signals=self.kill.sent,
            cleanup_signals=cleanup,
            usage=self.usage if self.sampler is None else self.usage.merge(self.sampler.usage()),
        )


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
