"""One client connection: reading, flow control, its own output buffer, closing.

Connections are watched directly by the server's ``loop.Loop`` (its epoll set): a
readable socket costs one ``recv_into``, its replies one ``send`` (that is most of what a
request costs in Python). What the bytes mean is ``framing``'s business.
Replies to one batch of input go out together. A blocked reserve holds the connection's
later commands until it is answered.

Memory per connection is bounded: unprocessed input past ``INPUT_LIMIT`` stops reading
(the kernel buffers the rest), unsent output past ``WRITE_HIGH`` stops processing input
until it drains below ``WRITE_LOW``. Every reply goes through ``send``, which holds it
back while a ``-f 0`` binlog has changes that are not durable yet (see ``net``).
"""

from __future__ import annotations

import socket
import sys
from select import EPOLLIN, EPOLLOUT
from typing import TYPE_CHECKING

from cmdstalk_py.server import commands
from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.framing import BODY, CMD, SKIP, process

if TYPE_CHECKING:
    from cmdstalk_py.server.net import Server

#: Bytes asked of the kernel per read, into a buffer shared by the connections of one
#: server (a fresh 256 KiB bytes object per ``recv`` can cost an mmap/munmap pair).
RECV_SIZE = 1 << 18
#: Stop reading from a connection holding this much unprocessed input (blocked reserve,
#: or a client that does not read its replies); the kernel buffers the rest.
INPUT_LIMIT = 1 << 20
#: Unsent output above which the connection stops processing input, and below which
#: (after that) it starts again.
WRITE_HIGH = 1 << 20
WRITE_LOW = WRITE_HIGH // 4


class Connection:
    """One client connection and its engine session."""

    __slots__ = (
        "blocked",
        "broken",
        "close_when_sent",
        "closed",
        "closing",
        "engine",
        "eof",
        "fd",
        "held",
        "held_size",
        "hold",
        "mask",
        "mode",
        "need",
        "out",
        "out_size",
        "parts",
        "parts_len",
        "put",
        "rbuf",
        "read_paused",
        "resume_scheduled",
        "server",
        "session",
        "skip_reply",
        "sock",
        "write_paused",
    )

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.server = server
        self.engine = server.engine
        self.sock = sock
        self.fd = sock.fileno()
        self.rbuf = server.recv_buffer
        self.mode = CMD
        # Unprocessed input kept between reads.
        self.parts: list[bytes] = []
        self.parts_len = 0
        self.put: p.Put | None = None
        self.need = 0  # bytes still wanted in BODY / SKIP mode
        self.skip_reply = b""
        self.blocked = False  # waiting in a reserve
        self.write_paused = False  # too much output waiting: input is not processed
        self.read_paused = False  # too much input waiting: the socket is not read
        self.eof = False  # the client half-closed
        self.closing = False  # no more input is processed (quit, EOF done, broken)
        self.closed = False  # socket closed, session ended
        self.broken = False  # a send failed: torn down on the next loop iteration
        self.close_when_sent = False  # close once the output (held replies too) is out
        self.resume_scheduled = False
        self.out: list[bytes] = []  # output the kernel did not take yet
        self.out_size = 0
        # -f 0: replies waiting for the journal's next fsync (see Server._journal_tick).
        self.held: list[bytes] = []
        self.held_size = 0
        self.hold = server.sync_each  # replies may have to wait for an fsync
        self.mask = EPOLLIN
        self.session = self.engine.connect(self)

    # ---------------------------------------------------------------- socket events

    def on_events(self, ev: int) -> None:
        """The loop's handler for this socket: ``ev`` is the epoll event mask."""
        if ev & EPOLLIN:
            self.readable()
        if ev & EPOLLOUT:
            if not self.closed and self.out:
                self.writable()
        elif not ev & EPOLLIN:
            # Only an error or hang-up, on a socket we were not reading: the peer is
            # gone (we never shut down our sending side, so a hang-up is a reset).
            self.teardown()

    def readable(self) -> None:
        """The socket has input, an EOF or an error for us."""
        buffer = self.rbuf
        try:
            got = self.sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.teardown()
            return
        if not got:
            self._on_eof()
            return
        data = buffer[:got].tobytes()
        # Fast path: nothing held back, reading commands.
        if not self.parts and self.mode == CMD and not (
            self.blocked or self.write_paused or self.closing
        ):
            try:
                process(self, [], data)
            except Exception as exc:  # never let one client take the server down
                self._drop(exc)
            return
        if self.closing:
            return
        if self.mode == SKIP and not self.parts:
            # JOB_TOO_BIG: discard without keeping anything.
            need = self.need
            if len(data) < need:
                self.need = need - len(data)
                return
            data = data[need:]
            self.need = 0
            self.mode = CMD
            self._answer([self.skip_reply], data)
            return
        self.parts.append(data)
        self.parts_len += len(data)
        if self.blocked or self.write_paused:
            # Held back: keep it, up to a bound; past it the kernel buffers the rest.
            if self.parts_len > INPUT_LIMIT:
                self._pause_reading()
            return
        if self.mode == BODY and self.parts_len < self.need:
            return
        data = b"".join(self.parts)
        self.parts = []
        self.parts_len = 0
        self._answer([], data)

    def writable(self) -> None:
        """The kernel takes output again."""
        out = self.out
        data = out[0] if len(out) == 1 else b"".join(out)
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.teardown()
            return
        if n < len(data):
            self.out = [data[n:]]
            self.out_size = len(data) - n
        else:
            self.out = []
            self.out_size = 0
            if self.close_when_sent and not self.held:
                self.teardown()
                return
        self._update_mask()
        self._maybe_unpause()

    def _on_eof(self) -> None:
        self.eof = True
        self._update_mask()
        if self.blocked:
            reply = commands.abort_wait(self.engine, self.session)
            self.blocked = False
            if reply is not None:
                self.send(reply)
        if not self.write_paused:
            self._resume()

    def _pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._update_mask()

    def _update_mask(self) -> None:
        if self.closed:
            return
        mask = 0 if (self.eof or self.read_paused or self.closing) else EPOLLIN
        if self.out:
            mask |= EPOLLOUT
        if mask != self.mask:
            self.mask = mask
            self.server.loop.modify(self.fd, mask)

    # ---------------------------------------------------------------- output

    def send(self, data: bytes) -> None:
        """The one way out for replies: written now, or held until the journal syncs."""
        server = self.server
        if self.hold and (self.held or server.durable.needs_sync):  # type: ignore[union-attr]
            if not self.held:
                server.holders[self] = None
            self.held.append(data)
            self.held_size += len(data)
            if self.held_size > WRITE_HIGH:
                # Bound what one connection can pile up while the disk is slow or failing.
                self.write_paused = True
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self.out:
            self.out.append(data)
            self.out_size += len(data)
            if self.out_size > WRITE_HIGH:
                self.write_paused = True
            return
        if self.closed or self.broken:
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            # The peer is gone. Not torn down here: the batch being processed still uses
            # the session; its replies go nowhere.
            self.send_failed()
            return
        if n < len(data):
            self.queue_rest(data[n:])

    def queue_rest(self, rest: bytes) -> None:
        """The kernel took only part of a reply: keep ``rest`` (nothing was queued before)."""
        self.out.append(rest)
        self.out_size = len(rest)
        if self.out_size > WRITE_HIGH:
            self.write_paused = True
        self._update_mask()

    def release_held(self) -> None:
        """The journal synced: write the held replies (and close if that was asked)."""
        data = b"".join(self.held)
        self.held = []
        self.held_size = 0
        if self.closed:
            return
        self._write(data)
        if self.close_when_sent and not self.out:
            self.teardown()
            return
        self._maybe_unpause()

    def _maybe_unpause(self) -> None:
        if self.write_paused and self.out_size <= WRITE_LOW and self.held_size <= WRITE_HIGH:
            self.write_paused = False
            self._schedule_resume()

    def send_failed(self) -> None:
        """The peer is gone: drop output, end the connection on the next loop iteration."""
        if not self.broken:
            self.broken = True
            self.closing = True
            self.out = []
            self.out_size = 0
            self.server.loop.call_soon(self._teardown_later)

    def _teardown_later(self) -> None:
        self.teardown()
        self.server.after_batch()

    def close_when_done(self) -> None:
        """quit or EOF: close once every reply is out (held ones go first)."""
        self.closing = True
        if self.held or self.out:
            self.close_when_sent = True
            self._update_mask()
        else:
            self.teardown()

    def teardown(self) -> None:
        """Close the socket and end the session: its reserved jobs go back at once."""
        if self.closed:
            return
        self.closed = True
        self.closing = True
        server = self.server
        server.forget(self)
        self.sock.close()
        self.parts = []
        self.out = []
        self.held = []
        self.engine.disconnect(self.session, server.loop.time())

    # ---------------------------------------------------------------- processing

    def deliver(self, reply: bytes) -> None:
        """The blocked reserve got its answer; go on with the held commands."""
        self.blocked = False
        if self.closing:
            return
        self.send(reply)
        if self.parts or self.eof:
            self._schedule_resume()

    def _schedule_resume(self) -> None:
        if not self.resume_scheduled:
            self.resume_scheduled = True
            self.server.loop.call_soon(self._resume_soon)

    def _resume_soon(self) -> None:
        self._resume()
        self.server.after_batch()

    def _resume(self) -> None:
        self.resume_scheduled = False
        if self.closing or self.blocked or self.write_paused:
            return
        data = b"".join(self.parts)
        self.parts = []
        self.parts_len = 0
        if self.read_paused:
            self.read_paused = False
            self._update_mask()
        if self.mode == SKIP:
            take = min(self.need, len(data))
            self.need -= take
            data = data[take:]
            if self.need:
                self.finish_eof()
                return
            self.mode = CMD
            self._answer([self.skip_reply], data)
            return
        if self.mode == BODY and len(data) < self.need:
            if data:
                self.parts = [data]
                self.parts_len = len(data)
            self.finish_eof()
            return
        self._answer([], data)

    def finish_eof(self) -> None:
        """After a half-close: close once nothing is waiting any more."""
        if self.eof and not self.blocked and not self.closing:
            self.close_when_done()

    def _answer(self, out: list[bytes], data: bytes) -> None:
        try:
            process(self, out, data)
        except Exception as exc:  # never let one client take the server down
            self._drop(exc)

    def _drop(self, exc: Exception) -> None:
        print(f"cmdstalk-server: dropping connection: {exc!r}", file=sys.stderr)
        self.teardown()

    def keep_input(self, data: bytes, pos: int) -> None:
        """Keep ``data[pos:]`` (an incomplete line or body) for the next read."""
        if pos < len(data):
            rest = data[pos:] if pos else data
            self.parts = [rest]
            self.parts_len = len(rest)
            if self.parts_len > INPUT_LIMIT and (self.blocked or self.write_paused):
                self._pause_reading()

    def flush(self, out: list[bytes]) -> None:
        """Send the replies collected so far."""
        if out:
            self.send(out[0] if len(out) == 1 else b"".join(out))
