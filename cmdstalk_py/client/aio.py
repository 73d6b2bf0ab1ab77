"""``AsyncClient``: one beanstalkd connection on the running asyncio loop.

Each command method sends its request at once and returns a future of its reply (it is
not a coroutine): calling several before awaiting any pipelines them, and beanstalkd
answers in order (a job's ``delete`` and the next ``reserve`` go out together; the
``delete``'s reply is read first). Replies are framed by ``framing.ReplyFramer`` and
interpreted by the pure parsers of ``replies``; an error word raises its class from
``errors.ERROR_REPLIES``. Whatever breaks the connection (end of stream, a reply out of
step, a silent server) fails every request in flight with a ``CONNECTION_ERRORS`` member,
and the client is closed: the server takes back any job reserved on it.

A silent server: a request other than a plain ``reserve`` must see its reply begin within
``io_timeout`` seconds (``reserve-with-timeout T``: T more; ``touch(..., within=)``: less),
or the connection is aborted with ``TimeoutError``. One timer per connection watches the
oldest request, re-armed only when it fires, and cancelled once no bounded request is in
flight. A plain ``reserve`` waits however long it takes; a peer that vanished is found by
TCP keepalive.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from cmdstalk_py.client.errors import ConnectionLost, UnexpectedReply, error_for
from cmdstalk_py.client.framing import Reply, ReplyFramer
from cmdstalk_py.client.names import tube_bytes
from cmdstalk_py.client.pipeline import Job
from cmdstalk_py.client.replies import parse_int, parse_list, parse_reply, parse_stats

if TYPE_CHECKING:
    from greenstalk import StatsJob, StatsTube

T = TypeVar("T")
#: Bytes received at most per read (a stats reply is a few hundred; a job body may be
#: larger, and comes in several reads).
RECV_SIZE = 65536
Parse = Callable[[Reply], Any]


class _Pending:
    __slots__ = ("future", "limit", "parse", "sent")

    def __init__(
        self, future: asyncio.Future[Any], parse: Parse, limit: float | None, sent: float
    ) -> None:
        self.future = future
        self.parse = parse
        self.limit = limit  # seconds the reply may take to begin (None: no bound)
        self.sent = sent


class AsyncClient(asyncio.BufferedProtocol):
    """A connection's requests and replies; ``open`` makes a connected one."""

    def __init__(self, io_timeout: float = 30.0) -> None:
        self.io_timeout = io_timeout
        self.loop = self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._framer = ReplyFramer()
        # Replies are received into one reused buffer (``BufferedProtocol``), not a fresh
        # 256 KiB bytes object per receive as a plain Protocol's transport makes; one per
        # thread (its loop), shared by every connection on it: each receive is framed
        # (copied out) before the next begins, and a thousand idle workers must not hold
        # a thousand buffers.
        self._rx_view = _receive_buffer()
        self._pending: deque[_Pending] = deque()
        self._last_rx = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_due = 0.0
        self._error: BaseException | None = None
        self.closed = asyncio.Event()

    @classmethod
    async def open(cls, host: str, port: int, io_timeout: float = 30.0) -> AsyncClient:
        """A client connected to ``host:port`` within ``io_timeout`` seconds (``OSError``
        or ``TimeoutError`` otherwise; the name is resolved off the loop by asyncio)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(io_timeout):
            _, client = await loop.create_connection(lambda: cls(io_timeout), host, port)
        return client

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._last_rx = self._loop.time()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _keepalive(sock, self.io_timeout)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rx_view

    def buffer_updated(self, nbytes: int) -> None:
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

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionLost("Unexpected EOF"))

    # -- requests -----------------------------------------------------------------------

    def request(self, data: bytes, parse: Parse, limit: float | None) -> asyncio.Future[Any]:
        """Send ``data`` (one whole request) and return the future of its parsed reply."""
        future: asyncio.Future[Any] = self._loop.create_future()
        if self._error is not None or self._transport is None:
            future.set_exception(self._lost())
            future.exception()  # as in _fail: the awaiting caller still gets it
            return future
        self._transport.write(data)
        now = self._loop.time()
        self._pending.append(_Pending(future, parse, limit, now))
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
    def sock(self) -> socket.socket | None:
        """The connection's socket (for its options; never read or written past us)."""
        if self._transport is None:
            return None
        sock: socket.socket | None = self._transport.get_extra_info("socket")
        return sock

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
                # Retrieved here: a request whose reply nobody awaits any more (the rest
                # of a pipelined batch) must not log "exception never retrieved"; whoever
                # awaits it still gets the error.
                item.future.exception()
        if self._transport is not None:
            self._transport.abort()
        self.closed.set()

    def close(self) -> None:
        """Close the connection: requests in flight fail, a reserved job goes back."""
        self._fail(ConnectionLost("connection closed"))

    # -- commands -----------------------------------------------------------------------

    def _simple(self, data: bytes, expected: bytes, arity: int = 0) -> asyncio.Future[Any]:
        return self.request(
            data, lambda r: parse_reply(r.line, expected, arity), self.io_timeout
        )

    def _count(self, data: bytes, expected: bytes) -> asyncio.Future[int]:
        return self.request(
            data, lambda r: parse_int(parse_reply(r.line, expected, 1)[0]), self.io_timeout
        )

    def _block(self, data: bytes) -> asyncio.Future[bytes]:
        return self.request(data, _block_of, self.io_timeout)

    def use(self, tube: str) -> asyncio.Future[Any]:
        return self._simple(b"use %s\r\n" % tube_bytes(tube), b"USING", 1)

    def watch(self, tube: str) -> asyncio.Future[int]:
        return self._count(b"watch %s\r\n" % tube_bytes(tube), b"WATCHING")

    def ignore(self, tube: str) -> asyncio.Future[int]:
        return self._count(b"ignore %s\r\n" % tube_bytes(tube), b"WATCHING")

    def reserve(self, timeout: int | None = None) -> asyncio.Future[Job]:
        """The next job (``TimedOut``, ``DeadlineSoon``); ``None``: a plain ``reserve``."""
        if timeout is None:
            return self.request(b"reserve\r\n", _job_of, None)
        data = b"reserve-with-timeout %d\r\n" % timeout
        return self.request(data, _job_of, timeout + self.io_timeout)

    def delete(self, job_id: int) -> asyncio.Future[Any]:
        return self._simple(b"delete %d\r\n" % job_id, b"DELETED")

    def release(self, job_id: int, priority: int, delay: int = 0) -> asyncio.Future[Any]:
        return self._simple(b"release %d %d %d\r\n" % (job_id, priority, delay), b"RELEASED")

    def bury(self, job_id: int, priority: int) -> asyncio.Future[Any]:
        return self._simple(b"bury %d %d\r\n" % (job_id, priority), b"BURIED")

    def touch(self, job_id: int, within: float | None = None) -> asyncio.Future[Any]:
        """Restart a held job's TTR (``NotFound`` when no longer ours); ``within``: the
        reply must begin that soon (a touch must not outlast the command's kill point)."""
        limit = self.io_timeout if within is None else max(min(within, self.io_timeout), 0.001)
        return self.request(
            b"touch %d\r\n" % job_id, lambda r: parse_reply(r.line, b"TOUCHED", 0), limit
        )

    def stats_job(self, job_id: int) -> asyncio.Future[StatsJob]:
        return self.request(
            b"stats-job %d\r\n" % job_id, lambda r: parse_stats(_block_of(r)), self.io_timeout
        )

    def stats_tube(self, tube: str) -> asyncio.Future[StatsTube]:
        data = b"stats-tube %s\r\n" % tube_bytes(tube)
        return self.request(data, lambda r: parse_stats(_block_of(r)), self.io_timeout)

    def tubes(self) -> asyncio.Future[list[str]]:
        """Every tube on the server (``list-tubes``)."""
        return self.request(b"list-tubes\r\n", lambda r: parse_list(_block_of(r)), self.io_timeout)

    def tubes_listed(self) -> asyncio.Future[bytes]:
        """``list-tubes``' reply as it came (``replies.parse_list`` reads it): a poller
        that sees the same bytes as last time need not parse them again."""
        return self.request(b"list-tubes\r\n", _block_of, self.io_timeout)


_BUFFERS = threading.local()


def _receive_buffer() -> memoryview:
    view: memoryview | None = getattr(_BUFFERS, "view", None)
    if view is None:
        view = _BUFFERS.view = memoryview(bytearray(RECV_SIZE))
    return view


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
