"""Replies off a socket: lines and data blocks, with what is already buffered in view.

The bytes buffered here are known (``buffered``), so asking whether a pipelined reply has
already come costs no system call, and a read is one ``recv`` without file layers around
it. The end of the stream raises ``ConnectionLost``; a line or block without its CRLF
raises ``UnexpectedReply``. ``set_io_timeout`` has the kernel fail a send or receive that
makes no progress for a while (a silent server), which the reader reports as
``TimeoutError``.
"""

from __future__ import annotations

import socket
import struct

from cmdstalk_py.client.errors import ConnectionLost, UnexpectedReply

#: Bytes asked of the kernel per read of replies (a stats reply is a few hundred).
RECV_SIZE = 65536


def set_io_timeout(sock: socket.socket, seconds: float, *, send: bool = True) -> None:
    """Make blocking sends and receives on ``sock`` fail after ``seconds`` without progress
    (0: never). ``send=False`` sets the receive timeout alone."""
    whole = int(seconds)
    timeval = struct.pack("@ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    if send:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


class Reader:
    """Buffered reads of reply lines and data blocks from one socket."""

    def __init__(self, sock: socket.socket, io_timeout: float | None = None) -> None:
        self._sock = sock
        self._io_timeout = io_timeout
        self._buf = b""

    @property
    def buffered(self) -> int:
        """Bytes received but not read yet."""
        return len(self._buf)

    def _recv(self, size: int) -> bytes:
        try:
            chunk = self._sock.recv(size)
        except BlockingIOError:  # the kernel's receive timeout (``set_io_timeout``)
            raise TimeoutError(f"no reply from the server in {self._io_timeout:g}s") from None
        return chunk

    def read_line(self) -> bytes:
        """The next reply line, without its CRLF."""
        buf = self._buf
        end = buf.find(b"\n")
        while end < 0:
            searched = len(buf)
            chunk = self._recv(RECV_SIZE)
            if not chunk:
                self._buf = b""
                raise ConnectionLost("Unexpected EOF")
            buf += chunk
            end = buf.find(b"\n", searched)
        self._buf = buf[end + 1 :]
        if end == 0 or buf[end - 1] != 0x0D:
            raise UnexpectedReply(f"reply line without CRLF: {buf[: end + 1][:80]!r}")
        return buf[: end - 1]

    def read_body(self, size: int) -> bytes:
        """A data block of ``size`` bytes; its trailing CRLF is read and checked."""
        want = size + 2
        have = len(self._buf)
        if have >= want:
            data, self._buf = self._buf[:want], self._buf[want:]
        else:
            # A big job body comes in many pieces: join them once.
            parts = [self._buf]
            while have < want:
                chunk = self._recv(max(RECV_SIZE, want - have))
                if not chunk:
                    self._buf = b""
                    raise ConnectionLost("Unexpected EOF reading chunk")
                parts.append(chunk)
                have += len(chunk)
            buf = b"".join(parts)
            data, self._buf = buf[:want], buf[want:]
        if data[-2:] != b"\r\n":
            raise UnexpectedReply("data block without CRLF")
        return data[:-2]

    def read_lines(self, size: int = RECV_SIZE) -> list[bytes]:
        """Every complete line (without CRLF) after one ``recv``, which waits for data.

        For a reader of many pipelined one-line replies: it takes what has come, however
        many replies that is. Raises ``ConnectionLost`` at the end of the stream.
        """
        chunk = self._recv(size)
        if not chunk:
            raise ConnectionLost("Unexpected EOF")
        lines = (self._buf + chunk).split(b"\r\n")
        self._buf = lines.pop()
        return lines

    def clear(self) -> None:
        """Forget what is buffered (the connection is being closed)."""
        self._buf = b""
