"""Raw-socket load generator for benchmarks/server.py.

Hand-written beanstalkd protocol bytes over plain sockets (no client library), so the client
side costs as little CPU as Python allows: pipelined commands are pre-built byte strings,
replies are checked with C-level ``bytes`` operations where possible. Every reply is still
verified, so a server that answers errors quickly cannot look fast.

The workload functions here run inside the worker processes of server_workers.py.

Clients read every reply as soon as it arrives. Deferring reads to get bigger batches
(SO_RCVLOWAT, or short sleeps) was tried and stalled loopback TCP for 4-16 ms at a time:
the server sends each tiny reply as its own segment, and those segments are clocked by the
ACKs that the client's reads and next commands provoke.
"""

from __future__ import annotations

import re
import selectors
import socket
import struct
import time
from collections.abc import Sequence

Address = tuple[str, int]

# Fixed 32-byte body without CR or LF, so put/delete replies can be counted by line ends.
BODY = b"x" * 32
# Long enough that no reservation expires during a run.
TTR = 120
# A server that stays silent this long is hung: fail rather than wait forever.
IO_TIMEOUT = 60.0
_RECV = 1 << 16


class ProtocolError(RuntimeError):
    """The server answered something the benchmark did not expect."""


def put_command(body: bytes = BODY, pri: int = 0, delay: int = 0, ttr: int = TTR) -> bytes:
    """The bytes of one ``put`` command with its body."""
    return b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body)


def recv_some(sock: socket.socket) -> bytes:
    """One ``recv``; a closed connection is a protocol error, not an empty read."""
    try:
        data = sock.recv(_RECV)
    except BlockingIOError as exc:  # SO_RCVTIMEO expired
        raise ProtocolError(f"no reply within {IO_TIMEOUT:.0f}s") from exc
    if not data:
        raise ProtocolError("server closed the connection")
    return data


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from ``sock``."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        data = recv_some(sock)
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def set_blocking_with_kernel_timeout(sock: socket.socket) -> None:
    """Blocking mode, with SO_RCVTIMEO/SO_SNDTIMEO instead of Python's timeout.

    Python implements socket timeouts with a poll() before every recv and send; the kernel
    timeouts cost nothing per call and still turn a hung server into an error.
    """
    sock.settimeout(None)
    timeval = struct.pack("ll", int(IO_TIMEOUT), 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


def open_connection(address: Address, tube: str) -> socket.socket:
    """A connection that uses and watches only ``tube`` (verified), with TCP_NODELAY."""
    if tube == "default":
        raise ValueError("benchmark tubes must not be 'default' (the watch replies differ)")
    sock = socket.create_connection(address, timeout=IO_TIMEOUT)
    set_blocking_with_kernel_timeout(sock)
    # Request/response cycles would otherwise wait on Nagle's algorithm.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    name = tube.encode()
    sock.sendall(b"use %s\r\nwatch %s\r\nignore default\r\n" % (name, name))
    expected = b"USING %s\r\nWATCHING 2\r\nWATCHING 1\r\n" % name
    got = recv_exactly(sock, len(expected))
    if got != expected:
        sock.close()
        raise ProtocolError(f"set-up of tube {tube!r}: expected {expected!r}, got {got!r}")
    return sock


def command(sock: socket.socket, line: bytes) -> bytes:
    """Send one command line and return its one-line reply (no body)."""
    sock.sendall(line)
    data = recv_some(sock)
    while not data.endswith(b"\r\n"):
        data += recv_some(sock)
    return data


def stats(sock: socket.socket, line: bytes = b"stats\r\n") -> dict[str, str]:
    """The YAML dictionary of a ``stats``-family reply, as strings."""
    sock.sendall(line)
    data = recv_some(sock)
    while b"\r\n" not in data:
        data += recv_some(sock)
    header, _, rest = data.partition(b"\r\n")
    if not header.startswith(b"OK "):
        raise ProtocolError(f"{line!r}: {header!r}")
    size = int(header[3:])
    while len(rest) < size + 2:
        rest += recv_some(sock)
    result: dict[str, str] = {}
    for raw in rest[:size].decode().splitlines():
        key, sep, value = raw.partition(": ")
        if sep:
            result[key.strip()] = value.strip()
    return result


# --- workloads -------------------------------------------------------------------------------


_DELETED = b"DELETED\r\n"


def put_pipelined(
    sock: socket.socket, count: int, window: int, seconds: float | None = None, batch: int = 100
) -> int:
    """Put up to ``count`` jobs, ``window`` outstanding; return jobs inserted.

    With ``seconds``, no new puts are sent after that long (for servers whose speed is
    unknown, e.g. fsync on every put). At most ``window`` replies are ever unread, which
    keeps both directions well inside the socket buffers, so neither side can block the
    other on a full buffer.
    """
    batch = max(1, min(batch, window))
    cmd = put_command()
    chunk = cmd * batch
    sent = acked = 0
    tail = b""
    deadline = None if seconds is None else time.monotonic() + seconds
    while acked < count:
        if deadline is not None and time.monotonic() >= deadline:
            count = sent  # stop sending; collect what is outstanding
            if acked >= count:
                break
        while sent < count and sent - acked + batch <= window:
            n = min(batch, count - sent)
            sock.sendall(chunk if n == batch else cmd * n)
            sent += n
        data = tail + recv_some(sock)
        cut = data.rfind(b"\n") + 1
        complete, tail = data[:cut], data[cut:]
        lines = complete.count(b"\n")
        if complete.count(b"INSERTED ") != lines:
            bad = next(x for x in complete.split(b"\r\n") if not x.startswith(b"INSERTED "))
            raise ProtocolError(f"put: unexpected reply {bad!r}")
        acked += lines
    return acked


def _reserved_id(reply: bytes) -> bytes | None:
    """The job id of a complete single RESERVED reply, None while it is incomplete."""
    end = reply.find(b"\r\n")
    if end < 0:
        return None
    if not reply.startswith(b"RESERVED "):
        raise ProtocolError(f"reserve: unexpected reply {reply!r}")
    job_id, _, size = reply[9:end].partition(b" ")
    if len(reply) < end + 2 + int(size) + 2:
        return None
    return job_id


def cycles_blocking(sock: socket.socket, duration: float) -> int:
    """put → reserve → delete, one request at a time, for ``duration`` s; return cycles."""
    put = put_command()
    deadline = time.monotonic() + duration
    done = 0
    while True:
        sock.sendall(put)
        reply = recv_some(sock)
        while not reply.endswith(b"\r\n"):
            reply += recv_some(sock)
        if not reply.startswith(b"INSERTED "):
            raise ProtocolError(f"put: unexpected reply {reply!r}")
        sock.sendall(b"reserve\r\n")
        reply = recv_some(sock)
        job_id = _reserved_id(reply)
        while job_id is None:
            reply += recv_some(sock)
            job_id = _reserved_id(reply)
        sock.sendall(b"delete %s\r\n" % job_id)
        reply = recv_some(sock)
        while not reply.endswith(b"\r\n"):
            reply += recv_some(sock)
        if reply != b"DELETED\r\n":
            raise ProtocolError(f"delete: unexpected reply {reply!r}")
        done += 1
        if time.monotonic() >= deadline:
            return done


_PUT, _RESERVE, _DELETE = 0, 1, 2


class _CycleConn:
    """One connection's position in its put → reserve → delete cycle."""

    __slots__ = ("buf", "sock", "state")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.state = _PUT
        self.buf = b""

    def send(self, data: bytes) -> None:
        # One small command on a connection with nothing else outstanding always fits
        # in the empty send buffer; a short write would mean something is badly wrong.
        if self.sock.send(data) != len(data):
            raise ProtocolError("short send on a non-blocking socket")


def cycles_multiplexed(socks: Sequence[socket.socket], duration: float) -> int:
    """Many request/response clients in one process (epoll); return total cycles.

    Each connection has exactly one request outstanding at a time, like an independent
    client; one process serves many of them so that the load generator spends its CPU on
    protocol work rather than on context switches between blocked processes.
    """
    put = put_command()
    sel = selectors.DefaultSelector()
    conns = []
    for sock in socks:
        sock.setblocking(False)
        conn = _CycleConn(sock)
        sel.register(sock, selectors.EVENT_READ, conn)
        conns.append(conn)
    deadline = time.monotonic() + duration
    for conn in conns:
        conn.send(put)
    active = len(conns)
    done = 0
    while active:
        events = sel.select(IO_TIMEOUT)
        if not events:
            raise ProtocolError(f"no reply within {IO_TIMEOUT}s")
        for key, _ in events:
            conn = key.data
            data = conn.sock.recv(_RECV)
            if not data:
                raise ProtocolError("server closed the connection")
            reply = conn.buf + data
            if conn.state == _RESERVE:
                job_id = _reserved_id(reply)
                if job_id is None:
                    conn.buf = reply
                    continue
                conn.buf = b""
                conn.state = _DELETE
                conn.send(b"delete %s\r\n" % job_id)
                continue
            if not reply.endswith(b"\r\n"):
                conn.buf = reply
                continue
            conn.buf = b""
            if conn.state == _PUT:
                if not reply.startswith(b"INSERTED "):
                    raise ProtocolError(f"put: unexpected reply {reply!r}")
                conn.state = _RESERVE
                conn.send(b"reserve\r\n")
            else:
                if reply != b"DELETED\r\n":
                    raise ProtocolError(f"delete: unexpected reply {reply!r}")
                done += 1
                if time.monotonic() < deadline:
                    conn.state = _PUT
                    conn.send(put)
                else:
                    sel.unregister(conn.sock)
                    active -= 1
    sel.close()
    for sock in socks:
        set_blocking_with_kernel_timeout(sock)
    return done


_RESERVED_HEADER = re.compile(rb"RESERVED (\d+) (\d+)\r\n")


def parse_drain_replies(buf: bytes) -> tuple[list[bytes], int, int]:
    """Split pipelined RESERVED/DELETED replies: (reserved ids, deletes, bytes consumed).

    An incomplete reply at the end is left unconsumed; any other reply is an error.
    """
    ids: list[bytes] = []
    deleted = 0
    pos = 0
    size = len(buf)
    while pos < size:
        if buf.startswith(_DELETED, pos):
            deleted += 1
            pos += len(_DELETED)
            continue
        m = _RESERVED_HEADER.match(buf, pos)
        if m is None:
            if b"\n" in buf[pos : pos + 64] or size - pos >= 64:
                raise ProtocolError(f"drain: unexpected reply {buf[pos : pos + 64]!r}")
            break
        end = m.end() + int(m.group(2)) + 2
        if end > size:
            break
        ids.append(m.group(1))
        pos = end
    return ids, deleted, pos


def drain(sock: socket.socket, quota: int, window: int) -> int:
    """Reserve and delete exactly ``quota`` jobs, ``window`` reserves in flight; return deletes.

    The deletes of one batch of replies and the reserves that replace them go out in one
    write. Every client takes exactly its quota, and the quotas add up to the jobs that are
    ready, so no reserve ever blocks.
    """
    reserves_sent = min(window, quota)
    sock.sendall(b"reserve\r\n" * reserves_sent)
    deleted = 0
    buf = b""
    while deleted < quota:
        buf += recv_some(sock)
        ids, n_deleted, used = parse_drain_replies(buf)
        buf = buf[used:]
        deleted += n_deleted
        if ids:
            more = min(len(ids), quota - reserves_sent)
            reserves_sent += more
            out = b"".join([b"delete %s\r\n" % i for i in ids])
            sock.sendall(out + b"reserve\r\n" * more)
    return deleted
