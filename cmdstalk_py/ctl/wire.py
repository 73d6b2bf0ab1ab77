"""One connection's exchanges with a server, each bounded in time and bytes.

A command and its whole reply must be done within ``--timeout``: the deadline is set when
the command is sent and every send and receive gets only what is left of it, so a server
that trickles a byte at a time cannot stretch a reply past it. A reply line must end in
CRLF within ``LINE_LIMIT`` bytes and hold printable ASCII only; a data block must be at
most the limit its caller gives and end in CRLF. Anything else, a timeout, or the server
closing or breaking the connection raises ``ServerFault``.
"""

from __future__ import annotations

import socket
import time

from cmdstalk_py.ctl.replies import ServerFault, shown

#: Longest reply line ctl accepts, CRLF included ("RESERVED <id> <bytes>", "USING <tube>"
#: and every error word are far shorter).
LINE_LIMIT = 1024
#: Bytes asked of the kernel per read.
RECV_SIZE = 65536
_PRINTABLE = frozenset(range(0x20, 0x7F))


class Wire:
    """Commands out, reply lines and data blocks in, on one connected socket."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._deadline = 0.0
        self._buf = bytearray()

    def send(self, command: bytes) -> None:
        """Send ``command`` (its CRLF included) and start the clock for its reply."""
        if self._buf:
            raise ServerFault(f"the server sent bytes nobody asked for: '{shown(self._buf)}'")
        self._deadline = time.monotonic() + self._timeout
        try:
            self._sock.settimeout(self._left())
            self._sock.sendall(command)
        except TimeoutError:
            raise self._timed_out() from None
        except OSError as e:
            raise ServerFault(f"connection failed: {e}") from None

    def line(self) -> bytes:
        """The next reply line, without its CRLF."""
        scanned = 0
        while (end := self._buf.find(b"\n", scanned)) < 0:
            if len(self._buf) >= LINE_LIMIT:
                raise ServerFault(f"a reply line runs past {LINE_LIMIT} bytes without CRLF")
            scanned = len(self._buf)
            self._receive(RECV_SIZE)
        if end == 0 or self._buf[end - 1] != 0x0D:
            raise ServerFault(f"a reply line ends in LF alone, not CRLF: "
                              f"'{shown(self._buf[: end + 1])}'")  # fmt: skip
        if end + 1 > LINE_LIMIT:
            raise ServerFault(f"a reply line runs past {LINE_LIMIT} bytes")
        line = bytes(self._buf[: end - 1])
        del self._buf[: end + 1]
        if not _PRINTABLE.issuperset(line):
            raise ServerFault(f"a reply line holds bytes beanstalkd never sends: '{shown(line)}'")
        return line

    def block(self, size: int, limit: int, what: str) -> bytes:
        """A data block of ``size`` bytes and its CRLF; over ``limit`` is refused unread."""
        if size > limit:
            raise ServerFault(f"the server announces a {what} of {size} bytes, "
                              f"over ctl's limit of {limit}")  # fmt: skip
        while len(self._buf) < size + 2:
            self._receive(size + 2 - len(self._buf))
        if self._buf[size : size + 2] != b"\r\n":
            raise ServerFault(f"a {what} of {size} bytes is not followed by CRLF")
        data = bytes(self._buf[:size])
        del self._buf[: size + 2]
        return data

    def _receive(self, wanted: int) -> None:
        try:
            self._sock.settimeout(self._left())
            data = self._sock.recv(min(wanted, RECV_SIZE))
        except TimeoutError:
            raise self._timed_out() from None
        except OSError as e:
            raise ServerFault(f"connection failed: {e}") from None
        if not data:
            raise ServerFault("the server closed the connection before its reply was whole")
        self._buf += data

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self._timed_out()
        return left

    def _timed_out(self) -> ServerFault:
        return ServerFault(f"timed out: no whole reply within {self._timeout:g}s (--timeout)")
