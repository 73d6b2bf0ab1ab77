"""The server's end of one client connection: I/O, flow control, its state, closing.

A ``ServerConn`` is watched directly by the server's ``loop.Loop`` (its epoll set): a
readable socket costs one ``recv_into``, its replies one ``send``. What the bytes mean is
the ``framing.Framer``'s business: the connection feeds it what it reads, runs the events
that come out against the engine in turns (``commands.run_turn``: a bounded amount of
work each, the rest on the next loop iteration) and writes the replies of one turn
together. A blocked reserve
holds the connection's later commands until it is answered.

Memory per connection is bounded: unprocessed input past ``INPUT_LIMIT`` stops reading
while commands are held back (the kernel buffers the rest), unsent output past
``WRITE_HIGH`` stops processing input until it drains below ``WRITE_LOW``. Every reply
goes through ``send``, which holds it back while a ``-f 0`` binlog has changes that are
not durable yet (see ``net``).
"""

from __future__ import annotations

import sys
from select import EPOLLIN, EPOLLOUT

from cmdstalk_py.server import commands
from cmdstalk_py.server.commands import FLUSH_AT, TURN_COMMANDS, TURN_SECONDS, TurnEnd
from cmdstalk_py.server.conn_state import TRANSITIONS, State
from cmdstalk_py.server.framing import Framer

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from _socket import socket

    from cmdstalk_py.server.net import Server

__all__ = ["FLUSH_AT", "INPUT_LIMIT", "RECV_SIZE", "TURN_COMMANDS", "TURN_SECONDS", "WRITE_HIGH",
           "WRITE_LOW", "ServerConn", "State"]

#: Bytes asked of the kernel per read, into a buffer shared by the connections of one
#: server (so that a read does not allocate a fresh buffer of that size).
RECV_SIZE = 1 << 18
#: Stop reading from a connection holding this much unprocessed input while its commands
#: are held back (blocked reserve, or a client that does not read its replies); the
#: kernel buffers the rest.
INPUT_LIMIT = 1 << 20
#: Unsent output above which the connection stops processing input, and below which
#: (after that) it starts again.
WRITE_HIGH = 1 << 20
WRITE_LOW = WRITE_HIGH // 4

_run_turn = commands.run_turn
_EXHAUSTED = TurnEnd.EXHAUSTED
_WAITS = TurnEnd.WAITING
_QUIT = TurnEnd.QUIT

_OPEN = State.OPEN
_WAITING = State.WAITING
_CLOSING = State.CLOSING
_BROKEN = State.BROKEN
_CLOSED = State.CLOSED


class ServerConn:
    """The server's end of one client connection, and its engine session."""

    __slots__ = (
        "backed_up",
        "engine",
        "fd",
        "framer",
        "held",
        "held_size",
        "hold",
        "mask",
        "out",
        "out_size",
        "rbuf",
        "resume_pending",
        "server",
        "session",
        "sock",
        "state",
    )

    def __init__(self, server: Server, sock: socket) -> None:
        self.server = server
        self.engine = server.engine
        self.sock = sock
        self.fd = sock.fileno()
        self.rbuf = server.recv_buffer
        self.framer = Framer(self.engine.max_job_size)
        self.state = _OPEN
        # Flow control, not a state: unsent (or held) output passed WRITE_HIGH and has not
        # drained to WRITE_LOW yet, so input waits. It can start while WAITING.
        self.backed_up = False
        self.out: list[bytes] = []  # output the kernel did not take yet
        self.out_size = 0
        # -f 0: replies waiting for the journal's next fsync (see Server._journal_tick).
        self.held: list[bytes] = []
        self.held_size = 0
        self.hold = server.sync_each  # replies may have to wait for an fsync
        self.mask = EPOLLIN
        # Its turn is over with commands left (or a resume is due): they run from the
        # loop's queue, in order, whatever else arrives meanwhile.
        self.resume_pending = False
        self.session = self.engine.connect(self)

    # ---------------------------------------------------------------- state transitions

    def _become(self, new: State) -> None:
        """The one place ``state`` changes (callers name the transition in a comment)."""
        assert new in TRANSITIONS[self.state], (self.state, new)
        self.state = new

    def _wait(self) -> None:
        # OPEN -> WAITING: a reserve found no job.
        self._become(_WAITING)

    def deliver(self, reply: bytes) -> None:
        """The blocked reserve got its answer; go on with the held commands."""
        if self.state is not _WAITING:
            return  # broken or closed meanwhile: the reply goes nowhere
        # WAITING -> OPEN: the engine answered the reserve.
        self._become(_OPEN)
        self.send(reply)
        if self.framer.pending or self.framer.eof:
            self._schedule_resume()

    def _abort_wait(self) -> None:
        reply = commands.abort_wait(self.engine, self.session)
        # WAITING -> OPEN: the client half-closed, the reserve times out now.
        self._become(_OPEN)
        if reply is not None:
            self.send(reply)

    def close_when_done(self) -> None:
        """quit or EOF: close once every reply is out (held ones go first)."""
        if self.state is not _OPEN:
            return  # broken (torn down soon) or already closing
        # OPEN -> CLOSING
        self._become(_CLOSING)
        if self.held or self.out:
            self._update_mask()
        else:
            self.teardown()

    def send_failed(self) -> None:
        """The peer is gone: drop output, end the connection on the next loop iteration."""
        if self.state in (_BROKEN, _CLOSED):
            return
        # OPEN/WAITING/CLOSING -> BROKEN. Not torn down at once: the batch being processed
        # still uses the session; its replies go nowhere.
        self._become(_BROKEN)
        self.out = []
        self.out_size = 0
        self.server.loop.call_soon(self._teardown_later)

    def teardown(self) -> None:
        """Close the socket and end the session: its reserved jobs go back at once."""
        if self.state is _CLOSED:
            return
        # any -> CLOSED
        self._become(_CLOSED)
        server = self.server
        server.forget(self)
        self.sock.close()
        self.out = []
        self.held = []
        self.engine.disconnect(self.session, server.loop.time())

    def _teardown_later(self) -> None:
        self.teardown()
        self.server.after_batch()

    # ---------------------------------------------------------------- socket events

    def on_events(self, ev: int) -> None:
        """The loop's handler for this socket: ``ev`` is the epoll event mask."""
        if ev & EPOLLIN:
            self.readable()
        if ev & EPOLLOUT:
            if self.state is not _CLOSED and self.out:
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
        state = self.state
        if state is not _OPEN and state is not _WAITING:
            return  # closing: input is no longer wanted
        framer = self.framer
        framer.receive_data(buffer[:got].tobytes())
        if state is _OPEN and not self.backed_up and not self.resume_pending:
            self._run()
        elif framer.buffered > INPUT_LIMIT:
            self._update_mask()  # held back past the bound: the kernel buffers the rest

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
            if self.state is _CLOSING and not self.held:
                self.teardown()
                return
        self._update_mask()
        self._maybe_unpause()

    def _on_eof(self) -> None:
        self.framer.receive_data(b"")
        self._update_mask()
        if self.state is _WAITING:
            self._abort_wait()
        if not self.backed_up and not self.resume_pending:
            self._resume()

    def _update_mask(self) -> None:
        state = self.state
        if state is _CLOSED:
            return
        reading = (
            (state is _OPEN or state is _WAITING)
            and not self.framer.eof
            and not (
                (state is _WAITING or self.backed_up or self.resume_pending)
                and self.framer.buffered > INPUT_LIMIT
            )
        )
        mask = EPOLLIN if reading else 0
        if self.out:
            mask |= EPOLLOUT
        if mask != self.mask:
            self.mask = mask
            self.server.loop.modify(self.fd, mask)

    # ---------------------------------------------------------------- output

    def send(self, data: bytes, released: bool = False) -> None:
        """The one way out for replies: held until the journal syncs (``-f 0``), queued
        behind unsent output, or written now. ``released``: the held replies, synced."""
        if self.hold and not released and (
            self.held or self.server.durable.needs_sync  # type: ignore[union-attr]
        ):
            if not self.held:
                self.server.holders[self] = None
            self.held.append(data)
            self.held_size += len(data)
            if self.held_size > WRITE_HIGH:
                # Bound what one connection can pile up while the disk is slow or failing.
                self.backed_up = True
            return
        if self.out:
            self.out.append(data)
            self.out_size += len(data)
            if self.out_size > WRITE_HIGH:
                self.backed_up = True
            return
        if self.state is _BROKEN or self.state is _CLOSED:
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self.send_failed()
            return
        if n < len(data):
            # The kernel took only part of it (and nothing was queued before).
            rest = data[n:]
            self.out.append(rest)
            self.out_size = len(rest)
            if self.out_size > WRITE_HIGH:
                self.backed_up = True
            self._update_mask()

    def release_held(self) -> None:
        """The journal synced: write the held replies (and close if that was asked)."""
        data = b"".join(self.held)
        self.held = []
        self.held_size = 0
        if self.state is _CLOSED:
            return
        self.send(data, released=True)
        if self.state is _CLOSING and not self.out:
            self.teardown()
            return
        self._maybe_unpause()

    def _maybe_unpause(self) -> None:
        if self.backed_up and self.out_size <= WRITE_LOW and self.held_size <= WRITE_HIGH:
            self.backed_up = False
            self._schedule_resume()

    # ---------------------------------------------------------------- processing

    def _schedule_resume(self) -> None:
        # At most one pending: a second would give this connection two turns per iteration.
        if not self.resume_pending:
            self.resume_pending = True
            self.server.loop.call_soon(self._resume_soon)

    def _resume_soon(self) -> None:
        self.resume_pending = False
        self._resume()
        self.server.after_batch()

    def _resume(self) -> None:
        if self.state is not _OPEN or self.backed_up:
            return
        self._run()
        self._update_mask()  # reading may have stopped while the input was held

    def _run(self) -> None:
        """One turn (``commands.run_turn``): the complete commands in the input, in order,
        their replies in one write; then wait, close, or schedule the next turn."""
        framer = self.framer
        try:
            out, end = _run_turn(self.engine, self.session, framer)
        except Exception as exc:  # never let one client take the server down
            print(f"cmdstalk-server: dropping connection: {exc!r}", file=sys.stderr)
            self.teardown()
            return
        if out:
            self.send(out[0] if len(out) == 1 else b"".join(out))
        if end is _EXHAUSTED:
            if framer.eof:
                self.close_when_done()
                return
        elif end is _WAITS:
            self._wait()
        elif end is _QUIT:
            self.close_when_done()
            return
        elif self.state is _OPEN and not self.backed_up:
            self._schedule_resume()  # its turn is over (backed up: resumed once drained)
        held_back = self.state is not _OPEN or self.backed_up or self.resume_pending
        if held_back and framer.buffered > INPUT_LIMIT:
            self._update_mask()  # held back past the bound: the kernel buffers the rest
