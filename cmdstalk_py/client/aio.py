"""``AsyncClient``: one beanstalkd connection on the running ``cmdstalk_py.loop`` loop.

Each command method sends its request at once and returns a future of its reply (it is
not a coroutine): calling several before awaiting any pipelines them, and beanstalkd
answers in order (a job's ``delete`` and the next ``reserve`` go out together; the
``delete``'s reply is read first). Replies are framed by ``framing.ReplyFramer`` and
interpreted by the pure parsers of ``replies``; an error word raises its class from
``errors.ERROR_REPLIES``. Whatever breaks the connection (end of stream, a reset, a reply
out of step, a silent server, a server that stops reading) fails every request in flight
with a ``CONNECTION_ERRORS`` member, and the client is closed: the server takes back any
job reserved on it.

The client owns its non-blocking socket, watched by the loop's epoll set (no transport
in between: a reply costs one ``recv_into`` into a buffer shared by the thread's
connections). A request is sent at once; what the kernel does not take is kept, in
order, and sent as the socket drains, up to ``MAX_UNSENT`` bytes waiting behind it.

A silent server: a request other than a plain ``reserve`` must see its reply begin within
``io_timeout`` seconds (``reserve-with-timeout T``: T more; ``touch(..., within=)``: less),
or the connection is aborted with ``TimeoutError``. One timer per connection watches the
oldest request, re-armed only when it fires, and cancelled once no bounded request is in
flight. A plain ``reserve`` waits however long it takes; a peer that vanished is found by
TCP keepalive.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from cmdstalk_py.client.errors import ConnectionLost, UnexpectedReply, error_for
from cmdstalk_py.client.framing import Reply, ReplyFramer
from cmdstalk_py.client.names import tube_bytes
from cmdstalk_py.client.pipeline import Job
from cmdstalk_py.client.replies import parse_int, parse_list, parse_reply, parse_stats
from cmdstalk_py.loop.core import get_running_loop
from cmdstalk_py.loop.tools import Event, timeout

if TYPE_CHECKING:
    from greenstalk import StatsJob, StatsTube

    from cmdstalk_py.loop.core import Loop, Timer
    from cmdstalk_py.loop.futures import Future

T = TypeVar("T")
#: Bytes received at most per read (a stats reply is a few hundred; a job body may be
#: larger, and comes in several reads).
RECV_SIZE = 65536
#: Request bytes that may wait for the socket to drain before another request is
#: refused (and the connection failed): the supervisor's requests are a few dozen bytes
#: each, so a backlog this large means the server stopped reading. One request larger
#: than this is still taken whole when nothing waits ahead of it.
MAX_UNSENT = 1 << 20
Parse = Callable[[Reply], Any]

_IN = select.EPOLLIN
_IN_OUT = select.EPOLLIN | select.EPOLLOUT
# A hang-up or an error is met by reading: recv gives the end of stream or raises it.
_READ_EVENTS = select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR


class _Pending:
    __slots__ = ("future", "limit", "parse", "sent")

    def __init__(self, future: Future[Any], parse: Parse, limit: float | None, sent: float) -> None:
        self.future = future
        self.parse = parse
        self.limit = limit  # seconds the reply may take to begin (None: no bound)
        self.sent = sent


class AsyncClient:
    """A connection's requests and replies; ``open`` makes a connected one.

    ``sock``: a connected socket, made non-blocking here and watched by the running loop
    from now on (the client closes it)."""

    def __init__(self, sock: socket.socket, io_timeout: float = 30.0) -> None:
        self.io_timeout = io_timeout
        self.loop: Loop = get_running_loop()
        self._loop = self.loop
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._open = True
        self._framer = ReplyFramer()
        # Replies are received into one reused buffer, not a fresh bytes object per
        # receive; one per thread (its loop), shared by every connection on it: each
        # receive is framed (copied out) before the next begins, and a thousand idle
        # workers must not hold a thousand buffers.
        self._rx_view = _receive_buffer()
        self._unsent = bytearray()  # request bytes the kernel has not taken yet, in order
        self._held: list[bytes] | None = None  # requests made between hold() and send_held()
        self._pending: deque[_Pending] = deque()
        self._last_rx = self._loop.time()
        self._watchdog: Timer | None = None
        self._watchdog_due = 0.0
        self._error: BaseException | None = None
        self.closed = Event()
        _keepalive(sock, io_timeout)
        with contextlib.suppress(OSError):  # a small request must not wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._loop.watch(self._fd, _IN, self._on_events)

    @classmethod
    async def open(cls, host: str, port: int, io_timeout: float = 30.0) -> AsyncClient:
        """A client connected to ``host:port`` within ``io_timeout`` seconds (``OSError``
        or ``TimeoutError`` otherwise). A name is resolved in the loop's executor (a
        numeric address at once); its addresses are tried in turn."""
        async with timeout(io_timeout):
            sock = await _connect(host, port)
        try:
            return cls(sock, io_timeout)
        except BaseException:
            sock.close()
            raise

    # -- the socket ---------------------------------------------------------------------

    def _on_events(self, events: int) -> None:
        if events & _READ_EVENTS:
            self._read()
        if events & select.EPOLLOUT and self._open:
            self._flush()

    def _read(self) -> None:
        try:
            nbytes = self._sock.recv_into(self._rx_view)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # a reset, or the error a hang-up left
            self._fail(e)
            return
        if nbytes == 0:
            self._fail(ConnectionLost("Unexpected EOF"))
            return
        self._received(nbytes)

    def _received(self, nbytes: int) -> None:
        self._last_rx = self._loop.time()
        try:
            replies = self._framer.feed(self._rx_view[:nbytes])
        except UnexpectedReply as e:
            self._fail(e)
            return
        for reply in replies:
            if not self._pending:
                self._fail(UnexpectedReply(f"reply with no request: {reply.line[:80]!r}"))
                return
            pending = self._pending.popleft()
            if pending.future.done():
                continue  # its waiter was cancelled; the reply still had to be read
            try:
                pending.future.set_result(pending.parse(reply))
            except Exception as e:  # an error word, or a reply that makes no sense
                pending.future.set_exception(e)
                if isinstance(e, UnexpectedReply):
                    self._fail(e)
                    return
        if self._watchdog is not None and (not self._pending or self._pending[0].limit is None):
            # Nothing bounded is waiting (a worker back in a plain reserve): no timer left
            # to fire for nothing, thousands at once, an io_timeout after they connected.
            self._watchdog.cancel()
            self._watchdog = None

    def hold(self) -> None:
        """Keep the requests made from now until ``send_held`` for one write: a job's
        final command and the next reserve go out as one segment, which the server reads
        at one wake-up (two writes are two segments: the socket does not delay sends)."""
        if self._held is None:
            self._held = []

    def send_held(self) -> None:
        """Write what ``hold`` kept, at once (nothing: no write)."""
        held, self._held = self._held, None
        if held and self._error is None:
            self._write(b"".join(held))

    def _write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
            return
        if self._unsent:  # behind bytes still waiting: in order, after them
            if len(self._unsent) > MAX_UNSENT:
                unsent = len(self._unsent)
                self._fail(ConnectionLost(f"the server reads no requests ({unsent} bytes unsent)"))
                return
            self._unsent += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as e:
            self._fail(e)
            return
        if sent < len(data):
            self._unsent += memoryview(data)[sent:]
            self._loop.modify(self._fd, _IN_OUT)  # until it is drained (_flush)

    def _flush(self) -> None:
        try:
            sent = self._sock.send(self._unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail(e)
            return
        del self._unsent[:sent]
        if not self._unsent:
            self._loop.modify(self._fd, _IN)

    # -- requests -----------------------------------------------------------------------

    def request(self, data: bytes, parse: Parse, limit: float | None) -> Future[Any]:
        """Send ``data`` (one whole request) and return the future of its parsed reply."""
        future: Future[Any] = self._loop.create_future()
        if self._error is not None or not self._open:
            future.set_exception(self._lost())
            return future
        now = self._loop.time()
        # Pending before it is written: a write that breaks the connection fails it too.
        self._pending.append(_Pending(future, parse, limit, now))
        self._write(data)
        if self._error is not None:
            return future
        if limit is not None and (self._watchdog is None or now + limit < self._watchdog_due):
            # A bound shorter than the one watched (a touch before a kill point) re-arms.
            self._arm(now + limit)
        return future

    def _arm(self, due: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog_due = due
        self._watchdog = self._loop.call_at(due, self._check_silence)

    @property
    def sock(self) -> socket.socket:
        """The connection's socket (for its options; never read or written past us;
        closed once the client is)."""
        return self._sock

    @property
    def in_flight(self) -> int:
        """Requests sent whose reply has not come yet."""
        return len(self._pending)

    def _check_silence(self) -> None:
        self._watchdog = None
        now = self._loop.time()
        due: float | None = None
        for pending in self._pending:
            if pending.limit is None:
                break  # a plain reserve ahead: everything behind it waits for it
            # The reply must begin within its bound of its sending, or of the last bytes
            # received (a long reply still coming is progress).
            at = max(pending.sent, self._last_rx) + pending.limit
            if now >= at:
                self._fail(TimeoutError(f"no reply from the server in {pending.limit:g}s"))
                return
            due = at if due is None else min(due, at)
        if due is not None:
            self._arm(due)

    def _lost(self) -> BaseException:
        error = self._error or ConnectionLost("connection closed")
        if isinstance(error, OSError | ConnectionLost | UnexpectedReply):
            return error
        return ConnectionLost(str(error))

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        pending, self._pending = self._pending, deque()
        for item in pending:
            if not item.future.done():
                item.future.set_exception(self._lost())
        if self._open:
            # Closed at once: unsent requests are dropped, and the server sees the
            # connection end (and takes back a job reserved on it).
            self._open = False
            self._loop.unwatch(self._fd)
            self._sock.close()
            self._unsent.clear()
        self.closed.set()

    def close(self) -> None:
        """Close the connection: requests in flight fail, a reserved job goes back."""
        self._fail(ConnectionLost("connection closed"))

    # -- commands -----------------------------------------------------------------------

    def _simple(self, data: bytes, expected: bytes, arity: int = 0) -> Future[Any]:
        return self.request(
            data, lambda r: parse_reply(r.line, expected, arity), self.io_timeout
        )

    def _count(self, data: bytes, expected: bytes) -> Future[int]:
        return self.request(
            data, lambda r: parse_int(parse_reply(r.line, expected, 1)[0]), self.io_timeout
        )

    def _block(self, data: bytes) -> Future[bytes]:
        return self.request(data, _block_of, self.io_timeout)

    def use(self, tube: str) -> Future[Any]:
        return self._simple(b"use %s\r\n" % tube_bytes(tube), b"USING", 1)

    def watch(self, tube: str) -> Future[int]:
        return self._count(b"watch %s\r\n" % tube_bytes(tube), b"WATCHING")

    def ignore(self, tube: str) -> Future[int]:
        return self._count(b"ignore %s\r\n" % tube_bytes(tube), b"WATCHING")

    def reserve(self, timeout: int | None = None) -> Future[Job]:
        """The next job (``TimedOut``, ``DeadlineSoon``); ``None``: a plain ``reserve``."""
        if timeout is None:
            return self.request(b"reserve\r\n", _job_of, None)
        data = b"reserve-with-timeout %d\r\n" % timeout
        return self.request(data, _job_of, timeout + self.io_timeout)

    def delete(self, job_id: int) -> Future[Any]:
        return self._simple(b"delete %d\r\n" % job_id, b"DELETED")

    def release(self, job_id: int, priority: int, delay: int = 0) -> Future[Any]:
        return self._simple(b"release %d %d %d\r\n" % (job_id, priority, delay), b"RELEASED")

    def bury(self, job_id: int, priority: int) -> Future[Any]:
        return self._simple(b"bury %d %d\r\n" % (job_id, priority), b"BURIED")

    def touch(self, job_id: int, within: float | None = None) -> Future[Any]:
        """Restart a held job's TTR (``NotFound`` when no longer ours); ``within``: the
        reply must begin that soon (a touch must not outlast the command's kill point)."""
        limit = self.io_timeout if within is None else max(min(within, self.io_timeout), 0.001)
        return self.request(
            b"touch %d\r\n" % job_id, lambda r: parse_reply(r.line, b"TOUCHED", 0), limit
        )

    def stats_job(self, job_id: int) -> Future[StatsJob]:
        return self.request(
            b"stats-job %d\r\n" % job_id, lambda r: parse_stats(_block_of(r)), self.io_timeout
        )

    def stats_tube(self, tube: str) -> Future[StatsTube]:
        data = b"stats-tube %s\r\n" % tube_bytes(tube)
        return self.request(data, lambda r: parse_stats(_block_of(r)), self.io_timeout)

    def tubes(self) -> Future[list[str]]:
        """Every tube on the server (``list-tubes``)."""
        return self.request(b"list-tubes\r\n", lambda r: parse_list(_block_of(r)), self.io_timeout)

    def tubes_listed(self) -> Future[bytes]:
        """``list-tubes``' reply as it came (``replies.parse_list`` reads it): a poller
        that sees the same bytes as last time need not parse them again."""
        return self.request(b"list-tubes\r\n", _block_of, self.io_timeout)


_BUFFERS = threading.local()


def _receive_buffer() -> memoryview:
    view: memoryview | None = getattr(_BUFFERS, "view", None)
    if view is None:
        view = _BUFFERS.view = memoryview(bytearray(RECV_SIZE))
    return view


async def _connect(host: str, port: int) -> socket.socket:
    """A connected non-blocking socket to the first of ``host``'s addresses that
    accepts (as asyncio's ``create_connection``: each in turn; every one refused: its
    error, or all of theirs in one ``OSError``)."""
    errors: list[OSError] = []
    for family, kind, proto, _, address in await _addresses(host, port):
        sock = socket.socket(family, kind | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, proto)
        try:
            await _connect_one(sock, address)
        except OSError as e:
            sock.close()
            errors.append(e)
            continue
        except BaseException:  # a timeout or a cancellation: this socket goes too
            sock.close()
            raise
        return sock
    if len({str(e) for e in errors}) == 1:
        raise errors[0]
    raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")


async def _addresses(host: str, port: int) -> list[Any]:
    """``getaddrinfo``'s stream addresses of ``host``: a numeric address (IPv4 or IPv6)
    at once; a name in the loop's executor, since resolving it may block for seconds."""
    # An ASCII host as bytes: given a str, getaddrinfo encodes it with the "idna" codec,
    # whose import (unicodedata, stringprep) is a noticeable part of the start-up.
    given: str | bytes = host.encode("ascii") if host.isascii() else host
    try:
        return socket.getaddrinfo(
            given, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    except socket.gaierror:
        pass  # a name
    try:
        infos: list[Any] = await get_running_loop().run_in_executor(
            None, socket.getaddrinfo, given, port, 0, socket.SOCK_STREAM
        )
    except socket.gaierror as e:  # its own message does not say which name
        raise socket.gaierror(e.errno, f"cannot resolve {host!r}: {e.strerror}") from None
    if not infos:
        raise OSError(f"getaddrinfo() returned an empty list for {host!r}")
    return infos


async def _connect_one(sock: socket.socket, address: Any) -> None:
    code = sock.connect_ex(address)
    if code == 0:
        return
    if code not in (errno.EINPROGRESS, errno.EAGAIN, errno.EINTR):
        raise OSError(code, os.strerror(code))
    loop = get_running_loop()
    writable: Future[None] = loop.create_future()

    def on_writable(_events: int) -> None:
        if not writable.done():
            writable.set_result(None)

    fd = sock.fileno()
    loop.watch(fd, select.EPOLLOUT, on_writable)
    try:
        await writable
    finally:
        loop.unwatch(fd)
    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code != 0:
        raise OSError(code, f"Connect call failed {address}")


def _job_of(reply: Reply) -> Job:
    job_id, _ = parse_reply(reply.line, b"RESERVED", 2)
    assert reply.body is not None  # the framer reads a RESERVED reply's block
    return Job(parse_int(job_id), reply.body)


def _block_of(reply: Reply) -> bytes:
    parse_reply(reply.line, b"OK", 1)
    if reply.body is None:
        raise error_for(reply.line)
    return reply.body


def _keepalive(sock: socket.socket, idle: float) -> None:
    """TCP keepalive after ``idle`` seconds of silence: a worker waiting in a plain
    ``reserve`` learns of a peer that vanished (no FIN, no RST) without a request."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; elsewhere the system's defaults apply
            after = max(1, int(idle))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, after)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, after // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
