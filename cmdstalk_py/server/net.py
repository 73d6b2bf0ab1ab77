"""The network layer: one asyncio event loop, TCP and unix-socket listeners.

Framing follows 1.12 exactly (docs §1): a line ends at the first ``\\r`` if ``\\n``
follows it, within a 224-byte window; a full window without one is thrown away and the
input discarded up to the next CRLF (BAD_FORMAT). Replies to one batch of input are
written with one ``transport.write``. A blocked reserve holds the connection's later
commands until it is answered. One loop timer, re-armed to the earlier of the engine's and
the journal's next deadlines, drives every timeout and every binlog fsync.

With a binlog in ``-f 0`` mode nothing is acknowledged before it is durable: every reply
goes through ``Connection._send``, which holds it back while the journal has changes not
yet on disk. One journal tick per loop iteration (``call_soon``) then makes every change
of that iteration durable with one fsync (a group commit over all connections) and writes
the held replies, in order. A failed fsync keeps them held and is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
from typing import Any

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.journal import DurableJournal
from cmdstalk_py.server.session import Session

_CMD = 0  # reading a command line
_BODY = 1  # reading a put body
_SKIP = 2  # throwing away a JOB_TOO_BIG body
_ENDLINE = 3  # throwing away a too-long line up to its CRLF

_WINDOW = p.LINE_LIMIT
#: Stop reading from a connection holding this much unprocessed input (blocked reserve,
#: or a client that does not read its replies); the kernel buffers the rest.
INPUT_LIMIT = 1 << 20
#: Flush replies mid-batch once this many bytes are pending, to notice a slow reader.
_FLUSH_AT = 1 << 18
#: Write buffer high-water mark; above it the connection stops processing input.
WRITE_HIGH = 1 << 20
#: Seconds before a journal tick whose fsync failed is tried again.
SYNC_RETRY = 0.2

_Put = p.Put
_Rejected = p.Rejected
_Quit = p.Quit
_parse = p.parse_command
_clock = time.monotonic


class Server:
    """Listeners, connections and the single timer around one :class:`Engine`."""

    def __init__(
        self,
        engine: Engine,
        loop: asyncio.AbstractEventLoop,
        durable: DurableJournal | None = None,
    ) -> None:
        self.engine = engine
        self.loop = loop
        self.connections: set[Connection] = set()
        self.listeners: list[asyncio.Server] = []
        self.unix_paths: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        #: The binlog, driven from here: ticks, fsync timer, held replies (``-f 0``).
        self.durable = durable
        self.sync_each = durable is not None and durable.sync_each
        #: Connections with replies held until the next journal tick, in arrival order.
        self.holders: dict[Connection, None] = {}
        self._tick_scheduled = False
        self._journal_not_before = float("-inf")
        # Timers of recovered jobs, and a journal tick if maintenance is due.
        self.after_batch()

    async def listen_tcp(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (0: any free port); returns the bound address."""
        srv = await self.loop.create_server(
            lambda: Connection(self), host, port, reuse_address=True, backlog=1024
        )
        self.listeners.append(srv)
        name = srv.sockets[0].getsockname()
        return name[0], name[1]

    async def listen_unix(self, path: str) -> None:
        """Listen on a unix socket at ``path`` (a stale socket file is replaced)."""
        with contextlib.suppress(FileNotFoundError):
            if os.path.exists(path) and not os.path.isdir(path):
                os.unlink(path)
        srv = await self.loop.create_unix_server(lambda: Connection(self), path, backlog=1024)
        self.listeners.append(srv)
        self.unix_paths.append(path)

    async def listen_socket(self, sock: socket.socket) -> str:
        """Serve on an already listening TCP or unix socket; returns where, for messages."""
        if sock.family == socket.AF_UNIX:
            path = sock.getsockname()
            srv = await self.loop.create_unix_server(lambda: Connection(self), sock=sock)
            self.unix_paths.append(path)
            self.listeners.append(srv)
            return str(path)
        srv = await self.loop.create_server(lambda: Connection(self), sock=sock)
        self.listeners.append(srv)
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"

    def remove_unix_sockets(self) -> None:
        """Delete the socket files this server created."""
        for path in self.unix_paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.unix_paths.clear()

    def drain(self) -> None:
        """Enter drain mode: every later put is answered DRAINING."""
        self.engine.draining = True

    def close(self) -> None:
        """Stop listening and drop every connection."""
        for srv in self.listeners:
            srv.close()
        for conn in list(self.connections):
            conn.transport.abort()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ---------------------------------------------------------------- the timer

    def after_batch(self) -> None:
        """Send queued deliveries, schedule a due journal tick, re-arm the timer."""
        engine = self.engine
        if engine.deliveries:
            for session, reply in engine.take_deliveries():
                conn: Connection = session.owner  # type: ignore[assignment]
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
        assert durable is not None
        now = self.loop.time()
        if durable.tick(now):
            # Everything written before this tick is durable now (later compaction copies
            # may make the journal dirty again; they acknowledge nothing).
            if self.holders:
                holders = self.holders
                self.holders = {}
                for conn in holders:
                    conn.release_held()
        else:
            self._journal_not_before = now + SYNC_RETRY
        self.after_batch()


class Connection(asyncio.Protocol):
    """One client connection: framing, flow control, and its engine session."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.engine = server.engine
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.session: Session = None  # type: ignore[assignment]
        self.mode = _CMD
        # Unprocessed input kept between reads.
        self.parts: list[bytes] = []
        self.parts_len = 0
        self.put: p.Put | None = None
        self.need = 0  # bytes still wanted in _BODY / _SKIP mode
        self.skip_reply = b""
        self.blocked = False  # waiting in a reserve
        self.write_paused = False
        self.read_paused = False
        self.eof = False
        self.closing = False
        self.resume_scheduled = False
        # -f 0: replies waiting for the journal's next fsync (see Server._journal_tick).
        self.held: list[bytes] = []
        self.held_size = 0
        self.transport_paused = False  # the transport's own flow control
        self.close_when_sent = False  # quit/EOF while replies were held

    # ---------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.session = self.engine.connect(self)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self.server.holders.pop(self, None)
        self.held = []
        self.engine.disconnect(self.session, self.server.loop.time())
        self.parts = []
        self.server.after_batch()

    def pause_writing(self) -> None:
        self.transport_paused = True
        self.write_paused = True

    def resume_writing(self) -> None:
        self.transport_paused = False
        if self.held_size <= WRITE_HIGH:
            self.write_paused = False
            self._schedule_resume()

    def eof_received(self) -> bool:
        self.eof = True
        if self.blocked:
            reply = self.engine.abort_wait(self.session)
            self.blocked = False
            if reply is not None:
                self._send(reply)
        if not self.write_paused:
            self._resume()
        # Keep the transport open: replies still go out before we close it.
        return True

    def data_received(self, data: bytes) -> None:
        # Fast path: nothing held back, reading commands.
        if not self.parts and self.mode == _CMD and not (
            self.blocked or self.write_paused or self.closing
        ):
            self._answer([], data)
            return
        if self.closing:
            return
        if self.mode == _SKIP and not self.parts:
            # JOB_TOO_BIG: discard without keeping anything.
            need = self.need
            if len(data) < need:
                self.need = need - len(data)
                return
            data = data[need:]
            self.need = 0
            self.mode = _CMD
            self._answer([self.skip_reply], data)
            return
        self.parts.append(data)
        self.parts_len += len(data)
        if self.blocked or self.write_paused:
            # Held back: keep it, up to a bound; past it the kernel buffers the rest.
            if self.parts_len > INPUT_LIMIT and not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
            return
        if self.mode == _BODY and self.parts_len < self.need:
            return
        data = b"".join(self.parts)
        self.parts = []
        self.parts_len = 0
        self._answer([], data)

    # ---------------------------------------------------------------- replies

    def _send(self, data: bytes) -> None:
        """The one way out for replies: written now, or held until the journal syncs."""
        server = self.server
        if server.sync_each and (self.held or server.durable.needs_sync):  # type: ignore[union-attr]
            if not self.held:
                server.holders[self] = None
            self.held.append(data)
            self.held_size += len(data)
            if self.held_size > WRITE_HIGH:
                # Bound what one connection can pile up while the disk is slow or failing.
                self.write_paused = True
        else:
            self.transport.write(data)

    def release_held(self) -> None:
        """The journal synced: write the held replies (and close if that was asked)."""
        data = b"".join(self.held)
        self.held = []
        self.held_size = 0
        if self.transport.is_closing():
            return
        self.transport.write(data)
        if self.close_when_sent:
            self.transport.close()
        elif self.write_paused and not self.transport_paused:
            self.write_paused = False
            self._schedule_resume()

    def _close(self) -> None:
        # quit or EOF: close once every reply is out (held ones go first).
        self.closing = True
        if self.held:
            self.close_when_sent = True
        else:
            self.transport.close()

    # ---------------------------------------------------------------- processing

    def deliver(self, reply: bytes) -> None:
        """The blocked reserve got its answer; go on with the held commands."""
        self.blocked = False
        if self.closing:
            return
        self._send(reply)
        if self.parts or self.eof:
            self._schedule_resume()

    def _schedule_resume(self) -> None:
        if not self.resume_scheduled:
            self.resume_scheduled = True
            self.server.loop.call_soon(self._resume)

    def _resume(self) -> None:
        self.resume_scheduled = False
        if self.closing or self.blocked or self.write_paused:
            return
        data = b"".join(self.parts)
        self.parts = []
        self.parts_len = 0
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        if self.mode == _SKIP:
            take = min(self.need, len(data))
            self.need -= take
            data = data[take:]
            if self.need:
                self._finish_eof()
                return
            self.mode = _CMD
            self._answer([self.skip_reply], data)
            return
        if self.mode == _BODY and len(data) < self.need:
            if data:
                self.parts = [data]
                self.parts_len = len(data)
            self._finish_eof()
            return
        self._answer([], data)

    def _finish_eof(self) -> None:
        if self.eof and not self.blocked and not self.closing:
            self._close()

    def _answer(self, out: list[bytes], data: bytes) -> None:
        try:
            self._process(out, data)
        except Exception as exc:  # never let one client take the server down
            print(f"cmdstalk-server: dropping connection: {exc!r}", file=sys.stderr)
            self.closing = True
            self.transport.abort()
        self.server.after_batch()

    def _process(self, out: list[bytes], data: bytes) -> None:
        engine = self.engine
        session = self.session
        n = len(data)
        pos = 0
        mode = self.mode
        if mode == _BODY:
            put = self.put
            assert put is not None
            need = self.need
            if n < need:
                self._keep(data, 0)
                return
            out.append(engine.put(session, put, data[:need], _clock()))
            pos = need
            mode = self.mode = _CMD
        out_size = 0
        max_job_size = engine.max_job_size
        execute = engine.execute
        # Puts of one batch share one clock reading: their jobs then share one float object
        # for their creation time, which is 24 bytes per job saved on pipelined fills.
        put_now = _clock()
        while pos < n:
            if mode == _CMD:
                end = pos + _WINDOW
                if end > n:
                    end = n
                i = data.find(b"\r", pos, end - 1)
                if i < 0 or data[i + 1] != 10:
                    if end - pos < _WINDOW:
                        break
                    # A full window without a line end: drop it, then skip to CRLF.
                    pos = end
                    mode = self.mode = _ENDLINE
                    continue
                cmd = _parse(data[pos:i], max_job_size)
                pos = i + 2
                kind = type(cmd)
                if kind is _Put:
                    engine.begin_put(session)
                    need = cmd.size + 2  # type: ignore[union-attr]
                    if n - pos < need:
                        self.put = cmd  # type: ignore[assignment]
                        self.need = need
                        mode = self.mode = _BODY
                        break
                    reply = engine.put(session, cmd, data[pos : pos + need], put_now)  # type: ignore[arg-type]
                    pos += need
                elif kind is _Rejected:
                    reply = execute(session, cmd, 0.0)  # type: ignore[assignment]
                    skip = cmd.skip  # type: ignore[union-attr]
                    if skip:
                        if n - pos < skip:
                            self.need = skip - (n - pos)
                            self.skip_reply = reply
                            pos = n
                            mode = self.mode = _SKIP
                            break
                        pos += skip
                elif kind is _Quit:
                    self._flush(out)
                    self._close()
                    return
                else:
                    # The clock is read per command, like 1.12: times in replies must not lag.
                    r = execute(session, cmd, _clock())
                    if r is None:
                        if not self.eof:
                            self.blocked = True
                            break
                        r = engine.abort_wait(session) or p.TIMED_OUT
                    reply = r
                out.append(reply)
                out_size += len(reply)
                if out_size > _FLUSH_AT:
                    self._flush(out)
                    out = []
                    out_size = 0
                    if self.write_paused:
                        break
            else:  # _ENDLINE
                end = pos + _WINDOW
                if end > n:
                    end = n
                i = data.find(b"\r", pos, end - 1)
                if i < 0 or data[i + 1] != 10:
                    if end - pos < _WINDOW:
                        break
                    pos = end
                    continue
                pos = i + 2
                out.append(p.BAD_FORMAT)
                mode = self.mode = _CMD
        if out:
            self._send(out[0] if len(out) == 1 else b"".join(out))
        if pos < n:
            self._keep(data, pos)
        if self.eof and not self.blocked:
            self._finish_eof()

    def _keep(self, data: bytes, pos: int) -> None:
        if pos < len(data):
            rest = data[pos:] if pos else data
            self.parts = [rest]
            self.parts_len = len(rest)
            if self.parts_len > INPUT_LIMIT and (self.blocked or self.write_paused):
                self.read_paused = True
                self.transport.pause_reading()

    def _flush(self, out: list[bytes]) -> None:
        if out:
            self._send(out[0] if len(out) == 1 else b"".join(out))


def describe(address: Any) -> str:
    """``host:port`` or the unix path, for messages."""
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)
