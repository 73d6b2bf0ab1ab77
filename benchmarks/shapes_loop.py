"""The poll-loop worker shapes of ``shapes.py``: one thread, one epoll, N connections.

``Loop`` owns the epoll: every socket, pipe and pidfd is registered with the handler its
readiness calls. ``Slot`` is one connection to beanstalkd running one job at a time, a
small state machine (``Phase``). What starting and watching the command costs is the
runner's: ``BareRunner`` (the ``poll-loop`` shape: ``os.posix_spawn``, stdin on a pipe, a
pidfd) or ``FullRunner`` (``poll-loop-full``: the per-job system calls and work the
supervisor's features add; ``FEATURES`` names them, and each can be left out). Nothing
here blocks: ``run_command`` would, so commands are spawned and watched here.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import select
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, cast

import greenstalk
from drain import ARGV

from cmdstalk_py.client.replies import parse_int, parse_reply, parse_stats
from cmdstalk_py.process.control import CONTROL_ENV, CONTROL_FD
from cmdstalk_py.process.kill import group_exists
from cmdstalk_py.process.marker import MARKER, new_token
from cmdstalk_py.process.spawn import spawn
from cmdstalk_py.supervisor.jobenv import job_environment

#: Called when a job's command is over (exited, reaped, its pipes closed).
Done = Callable[[], None]


class Loop:
    """One epoll for every fd; each fd's readiness calls its handler.

    Handlers must tolerate a spurious call: an fd closed by an earlier handler of the same
    batch may already be reused by a new pipe or pidfd when its stale event comes up.
    """

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.handlers: dict[int, Callable[[], None]] = {}
        self.stopping = False
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.watch(self.wake_fd, self._stop)

    def watch(self, fd: int, handler: Callable[[], None]) -> None:
        self.epoll.register(fd, select.EPOLLIN)
        self.handlers[fd] = handler

    def forget(self, fd: int) -> None:
        self.epoll.unregister(fd)
        del self.handlers[fd]

    def stop(self) -> None:
        """End ``run`` (from any thread)."""
        os.eventfd_write(self.wake_fd, 1)

    def _stop(self) -> None:
        self.stopping = True

    def write_payload(self, fd: int, payload: bytes) -> None:
        write_payload(fd, payload)

    def run(self) -> None:
        while not self.stopping:
            for fd, _ in self.epoll.poll():
                handler = self.handlers.get(fd)
                if handler is not None:  # None: forgotten by a handler earlier in the batch
                    handler()

    def close(self) -> None:
        os.close(self.wake_fd)
        self.epoll.close()


class Reactor(Protocol):
    """What slots and runners need of a loop: an fd's readiness calls its handler.
    ``Loop`` is one; ``shapes_aio.LoopReactor`` puts the same on asyncio's loop or on
    ``cmdstalk_py.loop``'s."""

    def watch(self, fd: int, handler: Callable[[], None]) -> None: ...

    def forget(self, fd: int) -> None: ...

    def write_payload(self, fd: int, payload: bytes) -> None:
        """``payload`` on the command's stdin pipe ``fd``, then close it."""


class Runner(Protocol):
    """Starts a job's command and calls ``done`` once it is over; raises if it failed."""

    def start(self, job_id: int, body: bytes, stats: bytes, done: Done) -> None: ...

    def close(self) -> None: ...


# -- the connection ---------------------------------------------------------------------------


class Phase(enum.Enum):
    """What a connection waits for."""

    RESERVE = "reserve"  # RESERVED + the body
    STATS = "stats-job"  # OK + the job's stats YAML
    RUN = "run"  # the command to be over (the connection is quiet)
    DELETE = "delete"  # DELETED


#: Per phase: the reply word, its number of values, whether a body follows.
_REPLIES = {
    Phase.RESERVE: (b"RESERVED", 2, True),
    Phase.STATS: (b"OK", 1, True),
    Phase.DELETE: (b"DELETED", 0, False),
}


def split_reply(
    buffer: bytes, word: bytes, arity: int, with_body: bool
) -> tuple[list[bytes], bytes, bytes] | None:
    """(the reply's values, its body, the bytes after it), or None until ``buffer`` holds
    the whole reply. An error word raises its exception (``parse_reply``)."""
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    values = parse_reply(buffer[:end], word, arity)
    if not with_body:
        return values, b"", buffer[end + 2 :]
    stop = end + 2 + parse_int(values[-1])
    if len(buffer) < stop + 2:
        return None
    return values, buffer[end + 2 : stop], buffer[stop + 2 :]


def connect(host: str, port: int, tube: str) -> socket.socket:
    """A connection watching only ``tube``, non-blocking once set up."""
    sock = socket.create_connection((host, port), timeout=30)
    try:
        sock.sendall(b"watch %s\r\nignore default\r\n" % tube.encode())
        data = b""
        while data.count(b"\r\n") < 2:
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError("beanstalkd closed the connection")
            data += chunk
        for line in data.split(b"\r\n")[:2]:
            parse_reply(line, b"WATCHING", 1)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def send_whole(sock: socket.socket, command: bytes) -> None:
    """``command`` on a non-blocking connection. One short command at a time on a
    connection whose last reply was read: its send buffer is empty, so one send takes it
    whole."""
    if sock.send(command) != len(command):
        raise RuntimeError(f"short send of {command!r}")


class Slot:
    """One connection running one job at a time: reserve -> stats-job -> the command ->
    delete -> reserve again."""

    def __init__(self, loop: Reactor, sock: socket.socket, runner: Runner) -> None:
        self.sock, self.runner = sock, runner
        self.buffer = b""
        self.job_id, self.body = 0, b""
        self.phase = Phase.RESERVE
        loop.watch(sock.fileno(), self.readable)
        self._send(b"reserve\r\n")

    def _send(self, command: bytes) -> None:
        send_whole(self.sock, command)

    def readable(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        if not data:
            raise RuntimeError("beanstalkd closed a connection")
        self.buffer += data
        if self.phase is Phase.RUN:
            raise RuntimeError(f"reply while the command runs: {self.buffer[:80]!r}")
        reply = split_reply(self.buffer, *_REPLIES[self.phase])
        if reply is not None:
            values, body, self.buffer = reply
            self._on_reply(values, body)

    def _on_reply(self, values: list[bytes], body: bytes) -> None:
        if self.phase is Phase.RESERVE:  # RESERVE -> STATS
            self.job_id, self.body = parse_int(values[0]), body
            self.phase = Phase.STATS
            self._send(b"stats-job %d\r\n" % self.job_id)
        elif self.phase is Phase.STATS:  # STATS -> RUN
            self.phase = Phase.RUN
            self.runner.start(self.job_id, self.body, body, self._finished)
        else:  # DELETE -> RESERVE
            self.phase = Phase.RESERVE
            self._send(b"reserve\r\n")

    def _finished(self) -> None:  # RUN -> DELETE
        self.phase = Phase.DELETE
        self._send(b"delete %d\r\n" % self.job_id)


# -- the commands -----------------------------------------------------------------------------


class Children:
    """Commands started and not yet reaped, each watched with a pidfd in the loop."""

    def __init__(self, loop: Reactor) -> None:
        self.loop = loop
        self.live: dict[int, int] = {}  # pid -> pidfd

    def watch_exit(self, pid: int, job_id: int, on_exit: Callable[[], None]) -> None:
        """Reap ``pid`` once its pidfd is readable, then ``on_exit``; a failure raises."""
        pidfd = os.pidfd_open(pid)
        self.live[pid] = pidfd

        def exited() -> None:
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped == 0:  # a stale event (see Loop)
                return
            self.loop.forget(pidfd)
            os.close(self.live.pop(pid))
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                raise RuntimeError(f"job {job_id}: the command exited with {code}")
            on_exit()

        self.loop.watch(pidfd, exited)

    def close(self) -> None:
        """Kill and reap what still runs (the loop ended on an error)."""
        for pid, pidfd in self.live.items():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            self.loop.forget(pidfd)  # before the close: uvloop must not watch a closed fd
            os.close(pidfd)
        self.live.clear()


def write_payload(fd: int, payload: bytes) -> None:
    """The payload on the command's stdin, then end of file. The payload is far below the
    pipe's buffer, so the write returns at once. A command need not read its stdin: its exit
    status says whether it failed."""
    try:
        with contextlib.suppress(BrokenPipeError):
            os.write(fd, payload)
    finally:
        os.close(fd)


def spawn_bare(argv: list[str], env: dict[str, str]) -> tuple[int, int]:
    """``argv`` in a new session, stdin on a pipe: its pid and the pipe's write end."""
    read_end, write_end = os.pipe()
    try:
        stdin = [(os.POSIX_SPAWN_DUP2, read_end, 0)]
        pid = os.posix_spawn(argv[0], argv, env, file_actions=stdin, setsid=True)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return pid, write_end


class BareRunner(Children):
    """``poll-loop``: the command alone, stdin on a pipe, in a new session."""

    def __init__(
        self, loop: Reactor, tube: str, env: dict[str, str], argv: Sequence[str] = ARGV
    ) -> None:
        super().__init__(loop)
        self.env, self.argv = env, list(argv)

    def start(self, job_id: int, body: bytes, stats: bytes, done: Done) -> None:
        pid, stdin = spawn_bare(self.argv, self.env)
        self.loop.write_payload(stdin, body)
        self.watch_exit(pid, job_id, done)


#: What ``FullRunner`` adds per job; ``shapes.py --ablate`` leaves each out in turn.
FEATURES = frozenset({"pipes", "env", "stats", "sentinel", "group", "log"})
#: The stats a job's environment is made of when they are not parsed (``-stats``).
_FIXED_STATS = cast(
    "greenstalk.StatsJob",
    {"pri": 1024, "ttr": 120, "releases": 0, "timeouts": 0, "reserves": 1, "age": 0},
)


class FullRunner(Children):
    """``poll-loop-full``: what the supervisor's features add per job, without the logic.

    ``process.spawn`` with stdin, stdout, stderr and control pipes (the last three read
    until they hang up: ``pipes``), the job's environment with the run marker and the
    control fd (``env``), the stats parsed (``stats``), three short writes where the
    sentinel's messages go (``sentinel``), the process group checked after the reap
    (``group``), and one log line to a file (``log``). ``features``: those done.
    """

    def __init__(
        self,
        loop: Reactor,
        tube: str,
        env: dict[str, str],
        argv: Sequence[str] = ARGV,
        features: frozenset[str] = FEATURES,
    ) -> None:
        super().__init__(loop)
        self.tube, self.base, self.argv, self.features = tube, env, list(argv), features
        self.pipes: set[int] = set()
        self.sentinel = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        self.log_dir = Path(tempfile.mkdtemp(prefix="shapes-"))
        self.handler = logging.FileHandler(self.log_dir / "jobs.log")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.log = logging.getLogger("shapes.poll-loop-full")
        self.log.propagate = False
        self.log.setLevel(logging.INFO)
        self.log.addHandler(self.handler)

    def _environment(self, job_id: int, body: bytes, stats: bytes, token: str) -> dict[str, str]:
        job_stats = _FIXED_STATS
        if "stats" in self.features:
            job_stats = cast("greenstalk.StatsJob", parse_stats(stats))
        if "env" not in self.features:
            return self.base
        env = job_environment(self.base, job_id, self.tube, job_stats, body)
        env[MARKER] = token
        env[CONTROL_ENV] = str(CONTROL_FD)
        return env

    def _tell(self, line: bytes) -> None:
        if "sentinel" in self.features:
            os.write(self.sentinel, line)

    def start(self, job_id: int, body: bytes, stats: bytes, done: Done) -> None:
        started = time.monotonic()
        token = new_token()
        env = self._environment(job_id, body, stats, token)
        self._tell(b"+%s\n" % token.encode())
        open_pipes: list[int] = []
        if "pipes" in self.features:
            child = spawn(self.argv, env, control=True)
            pid, stdin = child.pid, child.stdin
            open_pipes += (child.stdout, child.stderr, child.control)
        else:
            pid, stdin = spawn_bare(self.argv, env)
        self._tell(b"=%s %d\n" % (token.encode(), pid))
        self.loop.write_payload(stdin, body)

        def over() -> None:
            if open_pipes or pid in self.live:
                return
            if "group" in self.features:
                group_exists(pid)
            self._tell(b"-%s\n" % token.encode())
            if "log" in self.features:
                self.log.info("job %d done in %.3fs", job_id, time.monotonic() - started)
            done()

        for fd in open_pipes:
            self._read_until_hangup(fd, open_pipes, over)
        self.watch_exit(pid, job_id, over)

    def _read_until_hangup(self, fd: int, open_pipes: list[int], over: Callable[[], None]) -> None:
        os.set_blocking(fd, False)
        self.pipes.add(fd)

        def readable() -> None:
            try:
                if os.read(fd, 65536):
                    return
            except BlockingIOError:  # a stale event (see Loop)
                return
            self.loop.forget(fd)
            os.close(fd)
            self.pipes.discard(fd)
            open_pipes.remove(fd)
            over()

        self.loop.watch(fd, readable)

    def close(self) -> None:
        super().close()
        for fd in self.pipes:
            self.loop.forget(fd)
            os.close(fd)
        self.pipes.clear()
        os.close(self.sentinel)
        self.log.removeHandler(self.handler)
        self.handler.close()
        shutil.rmtree(self.log_dir, ignore_errors=True)
