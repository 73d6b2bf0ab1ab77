"""``Client``: a small blocking beanstalkd client, and ``Job``.

For the tools that talk to a server from a plain thread: the Spark putter and dead-letter
export, the dashboard's queue view. The raw ``send`` / ``read_line`` / ``read_body`` /
``read_lines`` are public for callers that pipeline many commands themselves. Errors:
``errors.ReplyError`` for an error word, ``errors.CONNECTION_ERRORS`` when the connection
is unusable. The supervisor's workers use ``aio.AsyncClient`` on the event loop instead.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from cmdstalk_py.client.errors import ConnectionLost
from cmdstalk_py.client.names import DEFAULT_PORT, parse_address, tube_bytes
from cmdstalk_py.client.reader import Reader, set_io_timeout
from cmdstalk_py.client.replies import parse_int, parse_list, parse_reply, parse_stats

if TYPE_CHECKING:
    from greenstalk import StatsJob, StatsTube

DEFAULT_TUBE = "default"


def _reserve_command(timeout: int | None) -> bytes:
    return b"reserve" if timeout is None else b"reserve-with-timeout %d" % timeout


@dataclass(frozen=True, slots=True)
class Job:
    """A reserved or peeked job: its id and body."""

    id: int
    body: bytes


class Client:
    """One connection's commands (``sock`` is connected; the client closes it).

    ``use``: the tube to use; ``watch``: the tube, or tubes, to watch (``default`` is
    ignored unless it is one of them). ``io_timeout`` only names the kernel's timeout in
    errors; a plain ``reserve`` (no timeout) waits past it, as an idle worker must.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        use: str = DEFAULT_TUBE,
        watch: str | Sequence[str] = DEFAULT_TUBE,
        io_timeout: float | None = None,
    ) -> None:
        self.sock = sock
        self._io_timeout = io_timeout
        self._reader = Reader(sock, io_timeout)
        if use != DEFAULT_TUBE:
            self.use(use)
        tubes = (watch,) if isinstance(watch, str) else tuple(watch)
        if tubes and tubes != (DEFAULT_TUBE,):
            for tube in tubes:
                self.watch(tube)
            if DEFAULT_TUBE not in tubes:
                self.ignore(DEFAULT_TUBE)

    @classmethod
    def connect(cls, address: str, timeout: float | None = 30.0) -> Client:
        """A client on a new connection to ``host:port`` (the port defaults to 11300);
        ``ConnectionLost`` if it cannot connect. Socket operations time out after
        ``timeout`` seconds (``TimeoutError``)."""
        host, port = parse_address(address, DEFAULT_PORT)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to beanstalkd at {address}: {exc}") from exc
        # Requests are small and answered one at a time: never let Nagle hold them.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the server takes back any job reserved on it)."""
        self._reader.clear()
        self.sock.close()

    # -- raw access, for callers that pipeline themselves ------------------------------

    def send(self, data: bytes | bytearray) -> None:
        """Send ``data`` (whole requests) as they are."""
        try:
            self.sock.sendall(data)
        except BlockingIOError:  # the kernel's send timeout (``set_io_timeout``)
            raise TimeoutError(f"server not reading for {self._io_timeout:g}s") from None

    def read_line(self) -> bytes:
        """The next reply line, without its CRLF."""
        return self._reader.read_line()

    def read_body(self, size: int) -> bytes:
        """A reply's data block of ``size`` bytes (its CRLF is read too)."""
        return self._reader.read_body(size)

    def read_lines(self, size: int = 262144) -> list[bytes]:
        """Every complete reply line that has come, waiting for at least one ``recv``."""
        return self._reader.read_lines(size)

    def _command(self, cmd: bytes, expected: bytes, arity: int = 0) -> list[bytes]:
        self.send(cmd + b"\r\n")
        return parse_reply(self._reader.read_line(), expected, arity)

    def _job(self, cmd: bytes, expected: bytes) -> Job:
        job_id, size = self._command(cmd, expected, 2)
        return Job(parse_int(job_id), self._reader.read_body(parse_int(size)))

    def _data(self, cmd: bytes) -> bytes:
        (size,) = self._command(cmd, b"OK", 1)
        return self._reader.read_body(parse_int(size))

    # -- commands ----------------------------------------------------------------------

    def use(self, tube: str) -> None:
        self._command(b"use %s" % tube_bytes(tube), b"USING", 1)

    def watch(self, tube: str) -> int:
        """Watch ``tube``; the number of tubes watched."""
        return parse_int(self._command(b"watch %s" % tube_bytes(tube), b"WATCHING", 1)[0])

    def ignore(self, tube: str) -> int:
        """Stop watching ``tube``; the number of tubes watched (``NotIgnored`` if none)."""
        return parse_int(self._command(b"ignore %s" % tube_bytes(tube), b"WATCHING", 1)[0])

    def put(self, body: bytes, priority: int = 2**16, delay: int = 0, ttr: int = 60) -> int:
        """Put a job in the used tube; its id (``Buried`` if the server buried it)."""
        head = b"put %d %d %d %d\r\n%s" % (priority, delay, ttr, len(body), body)
        return parse_int(self._command(head, b"INSERTED", 1)[0])

    def reserve(self, timeout: int | None = None) -> Job:
        """The next job from the watched tubes (``TimedOut``, ``DeadlineSoon``).

        ``None``: plain ``reserve``, which waits for a job however long it takes; the I/O
        timeout is lifted meanwhile (a dead peer is found by TCP keepalive, a stop by
        shutting the socket down from another thread).
        """
        cmd = _reserve_command(timeout)
        if timeout is not None:
            return self._job(cmd, b"RESERVED")
        set_io_timeout(self.sock, 0, send=False)
        try:
            return self._job(cmd, b"RESERVED")
        finally:
            if self._io_timeout is not None:
                with contextlib.suppress(OSError):  # closed under us: nothing to restore
                    set_io_timeout(self.sock, self._io_timeout, send=False)

    def reserve_job(self, job_id: int) -> Job:
        return self._job(b"reserve-job %d" % job_id, b"RESERVED")

    def peek_buried(self) -> Job:
        """The head of the used tube's buried list (``NotFound`` when it has none)."""
        return self._job(b"peek-buried", b"FOUND")

    def delete(self, job_id: int) -> None:
        self._command(b"delete %d" % job_id, b"DELETED")

    def release(self, job_id: int, priority: int, delay: int = 0) -> None:
        self._command(b"release %d %d %d" % (job_id, priority, delay), b"RELEASED")

    def bury(self, job_id: int, priority: int) -> None:
        self._command(b"bury %d %d" % (job_id, priority), b"BURIED")

    def touch(self, job_id: int, within: float | None = None) -> None:
        """Restart the TTR of a job we hold (``NotFound`` when it is no longer ours).

        ``within``: seconds to wait for the reply at most, when sooner than the I/O
        timeout (``TimeoutError`` then; the connection is in an unknown state: drop it).
        A touch sent while a command runs must not outlast the command's kill point.
        """
        if within is None or (self._io_timeout is not None and within >= self._io_timeout):
            self._command(b"touch %d" % job_id, b"TOUCHED")
            return
        set_io_timeout(self.sock, max(within, 0.001))
        try:
            self._command(b"touch %d" % job_id, b"TOUCHED")
        except TimeoutError:
            raise TimeoutError(f"no reply to touch in {within:.1f}s") from None
        finally:
            with contextlib.suppress(OSError):  # closed under us: nothing to restore
                set_io_timeout(self.sock, self._io_timeout or 0)

    def stats_job(self, job_id: int) -> StatsJob:
        return cast("StatsJob", parse_stats(self._data(b"stats-job %d" % job_id)))

    def stats_tube(self, tube: str) -> StatsTube:
        return cast("StatsTube", parse_stats(self._data(b"stats-tube %s" % tube_bytes(tube))))

    def tubes(self) -> list[str]:
        """Every tube on the server (``list-tubes``)."""
        return parse_list(self._data(b"list-tubes"))
