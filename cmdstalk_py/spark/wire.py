"""The beanstalkd wire protocol as the Spark tools need it: replies, validation, a raw connection.

Reply words map to exception classes in one table (``ERROR_REPLIES``). Parsing helpers are
pure functions. ``Connection`` is a small blocking client for the request/response commands
the dead-letter tools use (peek-buried, stats-job, reserve-job, bury, delete); the fast
pipelined put path lives in ``putter``.
"""

from __future__ import annotations

import socket
from types import TracebackType

from cmdstalk_py.supervisor import config

DEFAULT_PORT = 11300
MAX_U32 = 2**32 - 1


class BeanstalkdError(Exception):
    """The server answered with an error word, or the connection failed."""

    reply: str = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.reply)


class OutOfMemory(BeanstalkdError):
    reply = "OUT_OF_MEMORY"


class InternalError(BeanstalkdError):
    reply = "INTERNAL_ERROR"


class BadFormat(BeanstalkdError):
    reply = "BAD_FORMAT"


class UnknownCommand(BeanstalkdError):
    reply = "UNKNOWN_COMMAND"


class ExpectedCrlf(BeanstalkdError):
    reply = "EXPECTED_CRLF"


class JobTooBig(BeanstalkdError):
    reply = "JOB_TOO_BIG"


class Draining(BeanstalkdError):
    reply = "DRAINING"


class Buried(BeanstalkdError):
    """A put was stored but buried: the server could not grow its priority queue."""

    reply = "BURIED"


class UnexpectedReply(BeanstalkdError):
    """A reply that makes no sense for the command sent (a protocol desync)."""

    reply = "UNEXPECTED"


class ConnectionLost(BeanstalkdError):
    """The server closed the connection or the socket failed."""

    reply = "CONNECTION_LOST"


ERROR_REPLIES: dict[bytes, type[BeanstalkdError]] = {
    b"OUT_OF_MEMORY": OutOfMemory,
    b"INTERNAL_ERROR": InternalError,
    b"BAD_FORMAT": BadFormat,
    b"UNKNOWN_COMMAND": UnknownCommand,
    b"EXPECTED_CRLF": ExpectedCrlf,
    b"JOB_TOO_BIG": JobTooBig,
    b"DRAINING": Draining,
}


def error_for(line: bytes) -> BeanstalkdError:
    """The exception for a reply line that is not the expected success reply."""
    word = line.split(b" ", 1)[0]
    cls = ERROR_REPLIES.get(word)
    if cls is not None:
        return cls()
    if word == b"BURIED":
        return Buried(line.decode("ascii", "replace"))
    return UnexpectedReply(f"unexpected reply {line[:80]!r}")


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; the port defaults to 11300) → ``(host, port)``.

    The supervisor's rules (``config.parse_address``), plus the default port that Spark
    options and commands have always allowed.
    """
    text = address.strip()
    if not text:
        raise ValueError("empty beanstalkd address")
    bare_host = text.rpartition("]")[2] == "" if text.startswith("[") else text.count(":") != 1
    return config.parse_address(f"{text}:{DEFAULT_PORT}" if bare_host else text)


def check_tube(name: str) -> bytes:
    """The tube name as bytes; ValueError unless the protocol accepts it."""
    return config.validate_tube(name).encode("ascii")


def check_u32(name: str, value: int) -> int:
    """``value`` if it fits the protocol's unsigned 32-bit fields, else ValueError."""
    if not 0 <= value <= MAX_U32:
        raise ValueError(f"{name} {value} is outside 0..{MAX_U32}")
    return value


def put_command(priority: int, delay: int, ttr: int, body: bytes) -> bytes:
    """The complete ``put`` request for one job (command line, body, CRLF)."""
    return b"put %d %d %d %d\r\n%s\r\n" % (priority, delay, ttr, len(body), body)


def parse_stats(body: bytes) -> dict[str, str]:
    """The flat YAML dictionary of ``stats-job`` / ``stats-tube`` → ``{key: value}``."""
    out: dict[str, str] = {}
    for line in body.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


class Connection:
    """A blocking beanstalkd connection for request/response commands."""

    def __init__(self, address: str, timeout: float | None = 30.0) -> None:
        self.address = address
        host, port = parse_address(address)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to beanstalkd at {address}: {exc}") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.address} lost: {exc}") from exc

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.address} lost: {exc}") from exc
        if not chunk:
            raise ConnectionLost(f"beanstalkd at {self.address} closed the connection")
        self._buf += chunk

    def read_line(self) -> bytes:
        """One reply line without its CRLF."""
        while (end := self._buf.find(b"\r\n")) < 0:
            self._fill()
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def read_body(self, size: int) -> bytes:
        """A reply's data block of ``size`` bytes (its trailing CRLF is consumed)."""
        while len(self._buf) < size + 2:
            self._fill()
        body = bytes(self._buf[:size])
        del self._buf[: size + 2]
        return body

    def _reply(self, ok: bytes, with_body: bool = False) -> tuple[list[bytes], bytes] | None:
        """Read a reply: its words and body when it starts with ``ok``, None on NOT_FOUND."""
        line = self.read_line()
        words = line.split(b" ")
        if words[0] == ok:
            body = self.read_body(int(words[-1])) if with_body else b""
            return words, body
        if words[0] == b"NOT_FOUND":
            return None
        raise error_for(line)

    def use(self, tube: str) -> None:
        self.send(b"use %s\r\n" % check_tube(tube))
        self._reply(b"USING")

    def peek_buried(self) -> tuple[int, bytes] | None:
        """The head of the used tube's buried list (id, body), or None when it has none."""
        self.send(b"peek-buried\r\n")
        reply = self._reply(b"FOUND", with_body=True)
        return None if reply is None else (int(reply[0][1]), reply[1])

    def stats_job(self, job_id: int) -> dict[str, str] | None:
        self.send(b"stats-job %d\r\n" % job_id)
        reply = self._reply(b"OK", with_body=True)
        return None if reply is None else parse_stats(reply[1])

    def stats_tube(self, tube: str) -> dict[str, str] | None:
        self.send(b"stats-tube %s\r\n" % check_tube(tube))
        reply = self._reply(b"OK", with_body=True)
        return None if reply is None else parse_stats(reply[1])

    def reserve_job(self, job_id: int) -> bytes | None:
        self.send(b"reserve-job %d\r\n" % job_id)
        reply = self._reply(b"RESERVED", with_body=True)
        return None if reply is None else reply[1]

    def bury(self, job_id: int, priority: int) -> bool:
        self.send(b"bury %d %d\r\n" % (job_id, priority))
        return self._reply(b"BURIED") is not None

    def delete(self, job_id: int) -> bool:
        self.send(b"delete %d\r\n" % job_id)
        return self._reply(b"DELETED") is not None
