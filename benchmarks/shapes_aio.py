"""The coroutine worker shapes of ``shapes.py``: N workers on one event loop.

The worker's code (``work``, the connections' reply framing, the runners' reactor) is one
body; the event loop under it is the variant's ``LoopKind``: asyncio's (``ASYNCIO``),
uvloop's (``UVLOOP``) or the project's own (``OWN``: ``cmdstalk_py.loop``'s ``core.Loop``,
its futures, tasks and ``tools.gather``), which the supervisor moves to (issue 26). The
loop runs in one thread of the benchmark (the main thread polls the queue). How a worker
talks to beanstalkd is the ``pattern``:

- ``protocol``: a coroutine per connection over an ``asyncio.Protocol`` that splits the
  replies out of ``data_received`` and hands each to the waiting request's future;
- ``buffered``: the same over an ``asyncio.BufferedProtocol``, received into one reused
  buffer (the plain transport receives into a fresh 256 KiB bytes object each time);
- ``streams``: a coroutine per connection over ``asyncio.open_connection``'s reader and
  writer (``readuntil`` / ``readexactly``);
- ``sock``: a coroutine per connection on a raw non-blocking socket with
  ``loop.sock_recv`` / ``loop.sock_sendall``;
- ``reader``: a coroutine per connection on a non-blocking socket read when
  ``loop.add_reader`` says it is readable, the replies split as ``protocol`` splits them:
  what a loop without transports offers (the own loop's pattern; on asyncio, how much of
  the difference is the loop's);
- ``callbacks``: no coroutines at all, ``shapes_loop.Slot``'s state machine with the
  socket's readiness from ``loop.add_reader``.

The own loop has no transports, streams or ``sock_*`` calls: it runs ``reader`` and
``callbacks`` only.

How its command runs is the ``spawn``:

- ``own``: ``shapes_loop``'s runners (``os.posix_spawn``, the exit seen on a pidfd with
  ``loop.add_reader``; ``FullRunner``'s pipes read the same way), the payload written
  non-blocking (``LoopReactor.write_payload``); the coroutine awaits a future the runner
  completes;
- ``subprocess``: ``asyncio.create_subprocess_exec``, the payload written to its stdin, with
  the policy's child watcher (Python 3.11: a thread per child waiting in ``waitpid``);
- ``subprocess-pidfd``: the same with ``asyncio.PidfdChildWatcher``.

(``subprocess`` and ``subprocess-pidfd`` are asyncio's only.)

Every variant does what ``poll-loop`` does per job: reserve, stats-job, the command, delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar, cast

from drain import ARGV
from shapes_loop import BareRunner, Runner, Slot, connect, send_whole, split_reply

from cmdstalk_py.client.replies import parse_int, parse_reply
from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop
from tests.helpers import BeanstalkServer

T = TypeVar("T")
#: Runs one job's command to its end; raises if it failed.
RunJob = Callable[[int, bytes, bytes], Awaitable[None]]
MakeRunner = Callable[["LoopReactor", str, dict[str, str], Sequence[str]], Runner]
#: Where a worker's failure goes (the drain stops on it).
Fail = Callable[[BaseException], None]
PATTERNS = ("protocol", "buffered", "streams", "sock", "reader", "callbacks")
SPAWNS = ("own", "subprocess", "subprocess-pidfd")


def uvloop_missing() -> str | None:
    """Why the uvloop shapes cannot run here, or None."""
    try:
        import uvloop  # noqa: F401
    except ImportError as e:
        return f"uvloop cannot be imported ({e})"
    return None


def new_uvloop() -> asyncio.AbstractEventLoop:
    import uvloop  # optional: not a dependency (the shapes skip without it)

    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


# -- what the workers need of an event loop (asyncio's, uvloop's and core.Loop have it) -----


class Waiter(Protocol[T]):
    """A future of either loop (``asyncio.Future``, ``futures.Future``)."""

    def done(self) -> bool: ...

    def set_result(self, result: T, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...

    def __await__(self) -> Generator[Any, None, T]: ...


class Running(Protocol):
    """A task of either loop, as the workers watch it."""

    def cancel(self) -> bool: ...

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...


class EventLoop(Protocol):
    """The loop methods the workers call: the same names on every loop."""

    def create_future(self) -> Waiter[Any]: ...

    def create_task(self, coro: Coroutine[Any, Any, None], /) -> Running: ...

    def add_reader(self, fd: int, callback: Callable[[], object], /) -> None: ...

    def remove_reader(self, fd: int, /) -> object: ...

    def add_writer(self, fd: int, callback: Callable[[], object], /) -> None: ...

    def remove_writer(self, fd: int, /) -> object: ...

    def call_soon_threadsafe(self, callback: Callable[[], object], /) -> object: ...

    def run_until_complete(self, coro: Coroutine[Any, Any, None], /) -> object: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class LoopKind:
    """One kind of event loop: how to make one, and its module's ``gather``."""

    new_loop: Callable[[Fail], EventLoop]  # a loop whose callbacks' exceptions go to Fail
    gather: Callable[..., Awaitable[object]]


def asyncio_loops(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> Callable[[Fail], EventLoop]:
    """``new_loop`` with an exception handler: a callback's exception (a runner's handler
    raised) goes to ``fail``."""

    def new(fail: Fail) -> EventLoop:
        def uncaught(_loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
            exc = context.get("exception")
            fail(exc if isinstance(exc, BaseException) else RuntimeError(context["message"]))

        loop = new_loop()
        loop.set_exception_handler(uncaught)
        return loop

    return new


def own_loop(fail: Fail) -> EventLoop:
    """A ``core.Loop`` whose callbacks' exceptions go to ``fail`` (``Loop.report`` is
    called in the ``except`` block that caught one)."""
    return Loop(report=lambda: fail(sys.exc_info()[1] or RuntimeError("reported, not raised")))


ASYNCIO = LoopKind(asyncio_loops(asyncio.new_event_loop), asyncio.gather)
UVLOOP = LoopKind(asyncio_loops(new_uvloop), asyncio.gather)
OWN = LoopKind(own_loop, tools.gather)


class LoopReactor:
    """``shapes_loop.Reactor`` on an event loop's ``add_reader``: runners and slots run on
    it unchanged."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        #: stdin pipes with part of a payload still to write, and that part
        self.writing: dict[int, memoryview] = {}

    def watch(self, fd: int, handler: Callable[[], None]) -> None:
        self.loop.add_reader(fd, handler)

    def forget(self, fd: int) -> None:
        self.loop.remove_reader(fd)

    def write_payload(self, fd: int, payload: bytes) -> None:
        """Write what the pipe takes now, the rest when it is writable, then close it.

        A payload up to beanstalkd's default job size fits an empty pipe's 64 KiB buffer,
        so the first write takes it whole: ``add_writer`` is only for bigger ones.
        """
        os.set_blocking(fd, False)
        self._write(fd, memoryview(payload))

    def _write(self, fd: int, rest: memoryview) -> None:
        try:
            rest = rest[os.write(fd, rest) :]
        except BlockingIOError:
            pass
        except BrokenPipeError:  # the command exited without reading: its status tells
            rest = rest[:0]
        if rest:
            # One writer per pipe, added once: core.Loop takes one handler per descriptor
            # (a second add_writer would fail), so the rest waits here, not in its args.
            if fd not in self.writing:
                self.loop.add_writer(fd, partial(self._write_rest, fd))
            self.writing[fd] = rest
            return
        if self.writing.pop(fd, None) is not None:
            self.loop.remove_writer(fd)
        os.close(fd)

    def _write_rest(self, fd: int) -> None:
        self._write(fd, self.writing[fd])

    def close(self) -> None:
        for fd in self.writing:
            self.loop.remove_writer(fd)
            os.close(fd)
        self.writing.clear()


# -- the connection patterns ----------------------------------------------------------------


class Connection(Protocol):
    """One beanstalkd connection watching one tube, a request at a time."""

    async def request(
        self, command: bytes, word: bytes, arity: int, with_body: bool
    ) -> tuple[list[bytes], bytes]:
        """Send ``command``; its reply's values and body (``split_reply``)."""

    def close(self) -> None: ...


async def watch_only(conn: Connection, tube: str) -> None:
    await conn.request(b"watch %s\r\n" % tube.encode(), b"WATCHING", 1, False)
    await conn.request(b"ignore default\r\n", b"WATCHING", 1, False)


class ReplySplitter:
    """Replies split out of the bytes received, each to the waiting request's future."""

    def __init__(self) -> None:
        self.buffer = b""
        self.expect: tuple[bytes, int, bool] = (b"", 0, False)
        self.waiter: Waiter[tuple[list[bytes], bytes]] | None = None

    def _received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is None:
            raise RuntimeError(f"a reply nobody waits for: {self.buffer[:80]!r}")
        try:
            reply = split_reply(self.buffer, *self.expect)
        except Exception as e:  # an error word: the request raises it
            self.waiter = None
            waiter.set_exception(e)
            return
        if reply is not None:
            values, body, self.buffer = reply
            self.waiter = None
            waiter.set_result((values, body))

    def _lost(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("beanstalkd closed a connection"))


class ReplyProtocol(ReplySplitter, asyncio.Protocol):
    """``protocol``: replies split out of ``data_received``, each to its request's future."""

    def __init__(self) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()

    async def request(
        self, command: bytes, word: bytes, arity: int, with_body: bool
    ) -> tuple[list[bytes], bytes]:
        assert self.transport is not None
        self.expect = (word, arity, with_body)
        waiter: asyncio.Future[tuple[list[bytes], bytes]]
        self.waiter = waiter = asyncio.get_running_loop().create_future()
        self.transport.write(command)
        return await waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class BufferedReplyProtocol(ReplyProtocol, asyncio.BufferedProtocol):
    """``buffered``: ``ReplyProtocol`` reading into one reused buffer (``recv_into``)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunk = bytearray(65536)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.chunk

    def buffer_updated(self, nbytes: int) -> None:
        self._received(bytes(memoryview(self.chunk)[:nbytes]))


class StreamConnection:
    """``streams``: ``asyncio.open_connection``'s reader and writer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(
        self, command: bytes, word: bytes, arity: int, with_body: bool
    ) -> tuple[list[bytes], bytes]:
        # No drain(): one short command on a connection whose last reply was read.
        self.writer.write(command)
        line = await self.reader.readuntil(b"\r\n")
        values = parse_reply(line[:-2], word, arity)
        if not with_body:
            return values, b""
        data = await self.reader.readexactly(parse_int(values[-1]) + 2)
        return values, data[:-2]

    def close(self) -> None:
        self.writer.close()


class SockConnection:
    """``sock``: a non-blocking socket read with ``loop.sock_recv``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""
        self.loop = asyncio.get_running_loop()

    async def request(
        self, command: bytes, word: bytes, arity: int, with_body: bool
    ) -> tuple[list[bytes], bytes]:
        await self.loop.sock_sendall(self.sock, command)
        while (reply := split_reply(self.buffer, word, arity, with_body)) is None:
            data = await self.loop.sock_recv(self.sock, 65536)
            if not data:
                raise ConnectionError("beanstalkd closed a connection")
            self.buffer += data
        values, body, self.buffer = reply
        return values, body

    def close(self) -> None:
        self.sock.close()


class ReaderConnection(ReplySplitter):
    """``reader``: a non-blocking socket read when the loop's ``add_reader`` calls."""

    def __init__(self, loop: EventLoop, sock: socket.socket) -> None:
        super().__init__()
        self.loop, self.sock = loop, sock
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:  # a stale event (see shapes_loop.Loop)
            return
        except ConnectionResetError:  # closed with a request unread: closed all the same
            data = b""
        if data:
            self._received(data)
            return
        self.loop.remove_reader(self.sock.fileno())  # else it is readable for ever
        self._lost()

    async def request(
        self, command: bytes, word: bytes, arity: int, with_body: bool
    ) -> tuple[list[bytes], bytes]:
        self.expect = (word, arity, with_body)
        waiter: Waiter[tuple[list[bytes], bytes]]
        self.waiter = waiter = self.loop.create_future()
        send_whole(self.sock, command)
        return await waiter

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


async def open_connection(
    pattern: str, loop: EventLoop, server: BeanstalkServer, tube: str
) -> Connection:
    """A connection of ``pattern`` (not ``callbacks``) on ``loop``, watching only ``tube``."""
    if pattern == "reader":
        # Set up blocking (before the drain's clock: nothing else runs yet), as the
        # poll-loop shapes' connections are; the own loop has no connect of its own.
        return ReaderConnection(loop, connect(server.host, server.port, tube))
    return await open_asyncio_connection(pattern, server, tube)


async def open_asyncio_connection(pattern: str, server: BeanstalkServer, tube: str) -> Connection:
    """A connection of an asyncio-only ``pattern`` watching only ``tube``."""
    loop = asyncio.get_running_loop()
    conn: Connection
    if pattern == "protocol":
        _, conn = await loop.create_connection(ReplyProtocol, server.host, server.port)
    elif pattern == "buffered":
        _, conn = await loop.create_connection(BufferedReplyProtocol, server.host, server.port)
    elif pattern == "streams":
        conn = StreamConnection(*await asyncio.open_connection(server.host, server.port))
    elif pattern == "sock":
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, (server.host, server.port))
        conn = SockConnection(sock)
    else:
        raise ValueError(f"no connection of pattern {pattern!r}")
    await watch_only(conn, tube)
    return conn


async def work(conn: Connection, run: RunJob) -> None:
    """One worker: reserve -> stats-job -> the command -> delete, until cancelled."""
    while True:
        values, body = await conn.request(b"reserve\r\n", b"RESERVED", 2, True)
        job_id = parse_int(values[0])
        _, stats = await conn.request(b"stats-job %d\r\n" % job_id, b"OK", 1, True)
        await run(job_id, body, stats)
        await conn.request(b"delete %d\r\n" % job_id, b"DELETED", 0, False)


# -- the commands -----------------------------------------------------------------------------


def run_with(runner: Runner, loop: EventLoop) -> RunJob:
    """``own``: the runner starts the command; its end completes a future of ``loop``."""

    async def run(job_id: int, body: bytes, stats: bytes) -> None:
        over: Waiter[None] = loop.create_future()
        runner.start(job_id, body, stats, partial(over.set_result, None))
        await over

    return run


class Subprocesses:
    """``subprocess``: ``asyncio.create_subprocess_exec``, the payload on its stdin pipe."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.argv, self.env = argv, env
        self.live: set[asyncio.subprocess.Process] = set()

    async def run(self, job_id: int, body: bytes, stats: bytes) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, env=self.env, start_new_session=True
        )
        self.live.add(proc)
        try:
            await self._feed(proc, body)
            code = await proc.wait()
        finally:
            self.live.discard(proc)
        if code != 0:
            raise RuntimeError(f"job {job_id}: the command exited with {code}")

    @staticmethod
    async def _feed(proc: asyncio.subprocess.Process, body: bytes) -> None:
        """A command need not read its stdin: its exit status tells whether it failed.
        (``communicate`` would do this, but uvloop reports a pipe closed by a command that
        already exited as RuntimeError.)"""
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
            proc.stdin.write(body)
            await proc.stdin.drain()
        proc.stdin.close()

    async def close(self) -> None:
        """Kill and reap what still runs (the drain stopped on an error)."""
        for proc in self.live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.live:  # asyncio's gather: none run on the own loop
            await asyncio.gather(*(proc.wait() for proc in self.live))


@contextmanager
def child_watcher(spawn: str, loop: EventLoop) -> Iterator[None]:
    """``subprocess-pidfd``: the policy's child watcher is a pidfd one, on ``loop``, while
    the block runs (Python 3.11's watches one loop; 3.12's picks the running one)."""
    if spawn != "subprocess-pidfd":
        yield
        return
    with warnings.catch_warnings():  # the child watcher API is deprecated from 3.12
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        before = policy.get_child_watcher()
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(cast(asyncio.AbstractEventLoop, loop))  # asyncio's spawn only
        policy.set_child_watcher(watcher)
        try:
            yield
        finally:
            policy.set_child_watcher(before)
            watcher.close()


# -- the shape --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One coroutine shape: its loop, connection pattern, spawn and runner."""

    kind: LoopKind
    pattern: str = "protocol"
    spawn: str = "own"
    make_runner: MakeRunner = BareRunner
    argv: tuple[str, ...] = tuple(ARGV)  # the command each job runs


class Workers:
    """``count`` workers of ``variant`` on one event loop in a thread of their own."""

    def __init__(
        self, variant: Variant, server: BeanstalkServer, tube: str, failures: list[BaseException]
    ) -> None:
        self.variant, self.server, self.tube, self.failures = variant, server, tube, failures
        self.loop = variant.kind.new_loop(self._fail)
        self.stop: Waiter[None] = self.loop.create_future()

    def _fail(self, exc: BaseException) -> None:
        self.failures.append(exc)
        if not self.stop.done():
            self.stop.set_result(None)

    def _ended(self, task: Running) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail(exc)

    async def serve(self, count: int, env: dict[str, str]) -> None:
        reactor = LoopReactor(self.loop)
        runner = self.variant.make_runner(reactor, self.tube, env, self.variant.argv)
        conns: list[Connection] = []
        socks: list[socket.socket] = []
        subprocesses = Subprocesses(self.variant.argv, env)
        try:
            if self.variant.pattern == "callbacks":
                socks += (connect(self.server.host, self.server.port, self.tube)
                          for _ in range(count))  # fmt: skip
                for sock in socks:
                    Slot(reactor, sock, runner)
                await self.stop
                return
            for _ in range(count):
                conns.append(
                    await open_connection(self.variant.pattern, self.loop, self.server, self.tube)
                )
            run = run_with(runner, self.loop) if self.variant.spawn == "own" else subprocesses.run
            tasks = [self.loop.create_task(work(conn, run)) for conn in conns]
            for task in tasks:
                task.add_done_callback(self._ended)
            await self.stop
            for task in tasks:
                task.cancel()
            await self.variant.kind.gather(*tasks, return_exceptions=True)
        finally:
            for sock in socks:
                self.loop.remove_reader(sock.fileno())
                sock.close()
            for conn in conns:
                conn.close()
            runner.close()
            reactor.close()
            await subprocesses.close()

    def _run(self, count: int, env: dict[str, str]) -> None:
        try:
            self.loop.run_until_complete(self.serve(count, env))
        except BaseException as exc:
            self.failures.append(exc)

    @contextmanager
    def running(self, count: int, env: dict[str, str]) -> Iterator[None]:
        with child_watcher(self.variant.spawn, self.loop):
            thread = threading.Thread(target=self._run, args=(count, env))
            thread.start()
            try:
                yield
            finally:
                self.loop.call_soon_threadsafe(self._stopping)
                thread.join()
                with contextlib.suppress(RuntimeError):  # uvloop: closed already
                    self.loop.close()

    def _stopping(self) -> None:
        if not self.stop.done():
            self.stop.set_result(None)


# -- at scale (scale.py --minimal) ------------------------------------------------------------

#: Connections being set up at a time: all 6,000 at once overflow the listen backlog of the
#: server, and a dropped SYN waits a second before it is sent again.
CONNECTING = 256


async def reserve_everywhere(host: str, port: int, per_tube: int) -> None:
    """``per_tube`` connections per listed tube, each waiting in ``reserve`` for good: what
    the asyncio shape costs at ``scale.py``'s scale with nothing else."""
    loop = asyncio.get_running_loop()
    _, lister = await loop.create_connection(ReplyProtocol, host, port)
    _, body = await lister.request(b"list-tubes\r\n", b"OK", 1, True)
    lister.close()
    tubes = [line[2:].decode() for line in body.splitlines() if line.startswith(b"- ")]
    connecting = asyncio.Semaphore(CONNECTING)

    async def worker(tube: str) -> None:
        async with connecting:
            _, conn = await loop.create_connection(ReplyProtocol, host, port)
            if tube != "default":
                await watch_only(conn, tube)
        await conn.request(b"reserve\r\n", b"RESERVED", 2, True)
        raise RuntimeError(f"a job of {tube} became ready")

    await asyncio.gather(*(worker(tube) for tube in tubes for _ in range(per_tube)))


def main(argv: Sequence[str]) -> None:
    """``python shapes_aio.py HOST:PORT PER_TUBE asyncio|uvloop``: ``reserve_everywhere``."""
    address, per_tube, loop_name = argv
    host, _, port = address.rpartition(":")
    new_loop = new_uvloop if loop_name == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(reserve_everywhere(host, int(port), int(per_tube)))


if __name__ == "__main__":
    main(sys.argv[1:])
