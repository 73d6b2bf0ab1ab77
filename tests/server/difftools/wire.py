"""Raw beanstalkd wire access for tests: one reply at a time, framing checked strictly.

A reply is one ``\\r\\n``-terminated line, plus a data chunk of the announced size and a
``\\r\\n`` for ``RESERVED``/``FOUND``/``OK``. Anything else arriving on the socket (a line
that no beanstalkd reply grammar allows, a chunk without its ``\\r\\n``) is a protocol
error of the server and is reported as a ``Malformed`` reply rather than guessed around.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import time
from dataclasses import dataclass

# Every reply line beanstalkd 1.12 can send (protocol reference, §4.3). NAME is the
# tube name grammar of §2; a server must never echo anything else after USING.
_NAME = r"[A-Za-z0-9+/;.$_()][A-Za-z0-9\-+/;.$_()]{0,199}"
_REPLY_LINE = re.compile(
    rb"(INSERTED \d+|BURIED \d+|BURIED|USING " + _NAME.encode() + rb"|RESERVED \d+ \d+"
    rb"|FOUND \d+ \d+|OK \d+|DELETED|RELEASED|TOUCHED|KICKED \d+|KICKED|WATCHING \d+"
    rb"|PAUSED|NOT_FOUND|NOT_IGNORED|DEADLINE_SOON|TIMED_OUT|EXPECTED_CRLF|JOB_TOO_BIG"
    rb"|DRAINING|BAD_FORMAT|UNKNOWN_COMMAND|OUT_OF_MEMORY|INTERNAL_ERROR)"
)
_DATA_WORDS = (b"RESERVED ", b"FOUND ", b"OK ")
# A reply line is short; a server streaming more than this without \r\n is broken.
_MAX_REPLY_LINE = 512
_YAML_LINE = re.compile(rb"(- " + _NAME.encode() + rb'|[a-z-]+: [^\n]*)')


@dataclass(frozen=True)
class Reply:
    """One complete reply: its line (without ``\\r\\n``) and its data chunk, if any."""

    line: bytes
    data: bytes | None = None

    @property
    def word(self) -> str:
        return self.line.split(b" ", 1)[0].decode("latin-1")


@dataclass(frozen=True)
class Eof:
    """The server closed the connection (after ``extra`` stray bytes, if any)."""

    extra: bytes = b""


@dataclass(frozen=True)
class Timeout:
    """No complete reply before the deadline; ``partial`` holds what did arrive."""

    partial: bytes = b""


@dataclass(frozen=True)
class Malformed:
    """Bytes that are not a beanstalkd reply."""

    raw: bytes
    why: str


Event = Reply | Eof | Timeout | Malformed


def yaml_problem(body: bytes) -> str | None:
    """Why ``body`` is not a beanstalkd YAML document (§7), or None if it is one."""
    if not body.startswith(b"---\n"):
        return "YAML body does not start with ---\\n"
    if not body.endswith(b"\n"):
        return "YAML body does not end with \\n"
    for line in body[4:-1].split(b"\n") if len(body) > 4 else []:
        if not _YAML_LINE.fullmatch(line):
            return f"bad YAML line {line!r}"
    return None


def parse_yaml(body: bytes) -> dict[str, str] | list[str]:
    """The flat mapping or list of a beanstalkd YAML body (already checked)."""
    lines = body.decode("latin-1").split("\n")[1:-1]
    if lines and lines[0].startswith("- "):
        return [ln[2:] for ln in lines]
    out: dict[str, str] = {}
    for ln in lines:
        key, _, value = ln.partition(": ")
        out[key] = value
    return out


class Conn:
    """A raw client connection that reads replies with deadlines."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self._buf = b""
        self.eof = False

    def send(self, data: bytes) -> bool:
        """Send all of ``data``; False if the server had already closed the connection."""
        self.sock.setblocking(True)
        self.sock.settimeout(30)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        finally:
            self.sock.setblocking(False)
        return True

    def half_close(self) -> None:
        """Shut down our sending side (a no-op if the server already reset us)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.sock.close()

    def _fill(self, deadline: float) -> bool:
        """Read more bytes; False when the deadline passed or EOF was seen."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([self.sock], [], [], left)
        if not ready:
            return False
        try:
            chunk = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return True
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self._buf += chunk
        return True

    def read(self, timeout: float) -> Event:
        """The next reply, or why there is none within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self._buf:
            if len(self._buf) > _MAX_REPLY_LINE:
                return self._malformed("reply line too long")
            if not self._fill(deadline):
                return self._stopped()
        end = self._buf.index(b"\r\n")
        line = self._buf[:end]
        if not _REPLY_LINE.fullmatch(line):
            return self._malformed("unknown reply line")
        if not line.startswith(_DATA_WORDS):
            self._buf = self._buf[end + 2 :]
            return Reply(line)
        size = int(line.rsplit(b" ", 1)[1])
        need = end + 2 + size + 2
        while len(self._buf) < need:
            if not self._fill(deadline):
                if self.eof:
                    return self._malformed("connection closed inside a data chunk")
                return Timeout(self._buf)
        chunk = self._buf[end + 2 : need]
        self._buf = self._buf[need:]
        if chunk[-2:] != b"\r\n":
            return Malformed(line + b"\r\n" + chunk, "data chunk not followed by \\r\\n")
        data = chunk[:-2]
        if line.startswith(b"OK "):
            problem = yaml_problem(data)
            if problem:
                return Malformed(line + b"\r\n" + chunk, problem)
        return Reply(line, data)

    def _stopped(self) -> Event:
        if self.eof:
            extra, self._buf = self._buf, b""
            return Eof(extra)
        return Timeout(self._buf)

    def _malformed(self, why: str) -> Malformed:
        raw, self._buf = self._buf, b""
        return Malformed(raw, why)

    def read_until_eof(self, timeout: float) -> list[Event]:
        """Every event up to and including EOF (or a Timeout/Malformed)."""
        events: list[Event] = []
        deadline = time.monotonic() + timeout
        while True:
            ev = self.read(max(0.0, deadline - time.monotonic()))
            events.append(ev)
            if not isinstance(ev, Reply):
                return events
