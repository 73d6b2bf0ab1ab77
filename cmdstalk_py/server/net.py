"""The network layer: TCP and unix-socket listeners and connections on one event loop.

The loop is ``loop.Loop`` (one epoll set; see there why not asyncio). Accepted sockets are
watched directly by it: a readable socket costs one ``recv_into``, the commands and one
``send`` (``conn.ServerConn``). After each batch of socket events the loop calls
:meth:`Server.after_events`, which sends replies to reserves that the batch unblocked and
re-arms the one loop timer to the earlier of the engine's and the journal's next
deadlines; that timer drives every timeout and every binlog fsync.

With a binlog in ``-f 0`` mode nothing is acknowledged before it is durable: every reply
goes through ``ServerConn.send``, which holds it back while the journal has changes not
yet on disk. One journal tick per loop iteration then makes every change of that
iteration durable with one fsync (a group commit over all connections) and writes the
held replies, in order. A failed fsync keeps them held and is retried.
"""

from __future__ import annotations

import _socket
import errno
import os
import select
import sys

from cmdstalk_py.loop.core import Loop, Timer
from cmdstalk_py.server import commands
from cmdstalk_py.server.conn import INPUT_LIMIT, RECV_SIZE, WRITE_HIGH, ServerConn
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.listen import bind_listener

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from cmdstalk_py.server.journal import DurableJournal

__all__ = ["INPUT_LIMIT", "WRITE_HIGH", "Server", "ServerConn", "describe"]

#: Seconds before a journal tick whose fsync failed is tried again.
SYNC_RETRY = 0.2
#: Seconds to stop accepting after running out of descriptors.
ACCEPT_RETRY = 1.0
_ACCEPTS_PER_EVENT = 128
_IN = select.EPOLLIN
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Server:
    """Listeners, connections and the single timer around one :class:`Engine`."""

    def __init__(
        self,
        engine: Engine,
        loop: Loop,
        durable: DurableJournal | None = None,
    ) -> None:
        self.engine = engine
        self.loop = loop
        #: Open connections by socket descriptor.
        self.connections: dict[int, ServerConn] = {}
        self.listeners: list[_socket.socket] = []
        self.unix_paths: list[str] = []
        #: Every read lands here first (one server, one thread: no one else writes it).
        self.recv_buffer = memoryview(bytearray(RECV_SIZE))
        self.closed = False
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        #: The binlog, driven from here: ticks, fsync timer, held replies (``-f 0``).
        self.durable = durable
        self.sync_each = durable is not None and durable.sync_each
        #: Connections with replies held until the next journal tick, in arrival order.
        self.holders: dict[ServerConn, None] = {}
        self._tick_scheduled = False
        self._journal_not_before = float("-inf")
        if loop.after_events is not None:
            raise RuntimeError("the loop already serves a Server")
        # Only -f 0 holds replies (see after_events); otherwise the batch's end is just
        # after_batch, called without a frame in between on every loop iteration.
        loop.after_events = self.after_events if self.sync_each else self.after_batch
        # Timers of recovered jobs, and a journal tick if maintenance is due.
        self.after_batch()

    # ---------------------------------------------------------------- listening

    def listen_tcp(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (0: any free port); returns the bound address."""
        sock = bind_listener(host, port)
        self.listen_socket(sock)
        name = sock.getsockname()
        return name[0], name[1]

    def listen_unix(self, path: str) -> None:
        """Listen on a unix socket at ``path`` (a stale socket file is replaced)."""
        self.listen_socket(bind_listener(f"unix:{path}", 0))

    def listen_socket(self, sock: _socket.socket) -> str:
        """Serve on an already listening TCP or unix socket; returns where, for messages."""
        sock.setblocking(False)
        self.listeners.append(sock)
        self.loop.add_reader(sock.fileno(), self._accept, sock)
        if sock.family == _socket.AF_UNIX:
            path = sock.getsockname()
            self.unix_paths.append(path)
            return str(path)
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self, lsock: _socket.socket) -> None:
        for _ in range(_ACCEPTS_PER_EVENT):
            try:
                # What socket.socket.accept wraps: the socket module is not loaded here
                # (start-up time), and _socket has no public accept.
                fd, _addr = lsock._accept()  # type: ignore[attr-defined]
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    return
                # Out of descriptors or memory: stop accepting for a while instead of
                # spinning on the listening socket (connections wait in the backlog).
                print(f"cmdstalk-server: cannot accept: {exc}", file=sys.stderr)
                fd = lsock.fileno()
                self.loop.remove_reader(fd)
                self.loop.call_later(ACCEPT_RETRY, self._resume_accepting, lsock)
                return
            sock = _socket.socket(lsock.family, lsock.type, lsock.proto, fd)
            sock.setblocking(False)
            if sock.family in (_socket.AF_INET, _socket.AF_INET6):
                try:  # noqa: SIM105 (contextlib is kept off the serving path: start-up time)
                    sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                except OSError:
                    pass
            conn = ServerConn(self, sock)
            self.connections[conn.fd] = conn
            self.loop.watch(conn.fd, _IN, conn.on_events)

    def _resume_accepting(self, lsock: _socket.socket) -> None:
        if not self.closed and lsock.fileno() >= 0:
            self.loop.add_reader(lsock.fileno(), self._accept, lsock)

    def forget(self, conn: ServerConn) -> None:
        """``conn`` is closing: stop watching its socket (before it is closed)."""
        self.connections.pop(conn.fd, None)
        self.holders.pop(conn, None)
        self.loop.unwatch(conn.fd)

    def remove_unix_sockets(self) -> None:
        """Delete the socket files this server created."""
        import contextlib  # only when shutting down

        for path in self.unix_paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.unix_paths.clear()

    def drain(self) -> None:
        """Enter drain mode: every later put is answered DRAINING."""
        self.engine.draining = True

    def close(self) -> None:
        """Stop listening and drop every connection (idempotent)."""
        if self.closed:
            return
        import contextlib  # only when shutting down

        for sock in self.listeners:
            with contextlib.suppress(OSError, ValueError):
                self.loop.remove_reader(sock.fileno())
            sock.close()
        for conn in list(self.connections.values()):
            conn.teardown()
        self.closed = True
        if self.loop.after_events in (self.after_events, self.after_batch):
            self.loop.after_events = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ---------------------------------------------------------------- socket events

    def after_events(self) -> None:
        """The loop handled a batch of socket events (every connection that had input)."""
        if self.closed:
            return
        if self.holders and self.loop.time() >= self._journal_not_before:
            # -f 0: this batch was every connection with input in this loop iteration, so
            # commit now (one fsync for all of them) rather than an iteration later.
            self._journal_tick()
        else:
            self.after_batch()

    # ---------------------------------------------------------------- the timer

    def after_batch(self) -> None:
        """Send queued deliveries, schedule a due journal tick, re-arm the timer."""
        if self.closed:
            return
        engine = self.engine
        if engine.waiters.deliveries:
            for session, reply in commands.deliveries(engine):
                conn: ServerConn = session.owner  # type: ignore[assignment]
                conn.deliver(reply)
        alarms = engine.alarms
        when = alarms[0][0] if alarms else None
        durable = self.durable
        if durable is not None and not self._tick_scheduled:
            due = durable.next_deadline()
            if due is not None:
                if due < self._journal_not_before:
                    due = self._journal_not_before
                if due <= self.loop.time():
                    # Once per loop iteration, after every connection that had input in it:
                    # with -f 0 this one fsync is the group commit of all of them.
                    self._tick_scheduled = True
                    self.loop.call_soon(self._journal_tick)
                elif when is None or due < when:
                    when = due
        if when != self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = None if when is None else self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.engine.tick(self.loop.time())
        self.after_batch()

    def _journal_tick(self) -> None:
        self._tick_scheduled = False
        durable = self.durable
        if durable is None or self.closed:
            return
        now = self.loop.time()
        if durable.sync_due(now):
            # Everything written before this tick is durable now (later compaction copies
            # may make the journal dirty again; they acknowledge nothing). The replies go
            # out before the maintenance step: a waiting client should not wait for it.
            if self.holders:
                holders = self.holders
                self.holders = {}
                for conn in holders:
                    conn.release_held()
            durable.maintain(now)
        else:
            self._journal_not_before = now + SYNC_RETRY
        self.after_batch()


def describe(address: Any) -> str:
    """``host:port`` or the unix path, for messages."""
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)
