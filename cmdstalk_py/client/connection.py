"""One beanstalkd connection that heals itself: reconnect with tenacity, restore use/watch.

Every broker and the dispatcher own one. ``client()`` hands out a connected greenstalk
client, (re)connecting first when needed: exponential backoff with jitter, capped, each
failed attempt logged with the address, until it works or the stop event is set (then
``Stopped``). Callers report a broken connection with ``drop()``; the next ``client()``
connects afresh. Connection errors never escape as anything but ``Stopped``.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import struct
import threading
from typing import cast

import greenstalk
import tenacity

from cmdstalk_py.ops.observers import Observer

log = logging.getLogger("cmdstalk.connection")

#: Bytes asked of the kernel per read of replies (a stats reply is a few hundred).
RECV_SIZE = 65536

# What a dead or confused connection looks like through greenstalk: socket errors and EOF
# (OSError, ConnectionError), a reply cut short (greenstalk asserts on the CRLF, int() on
# the numbers) or a reply word it does not know. The connection is unusable after any.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    AssertionError,
    ValueError,
    greenstalk.UnknownResponseError,
)



def set_io_timeout(sock: socket.socket, seconds: float) -> None:
    """Make blocking sends and receives on ``sock`` fail after ``seconds`` without progress."""
    whole = int(seconds)
    timeval = struct.pack("@ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


class Client(greenstalk.Client[bytes]):
    """greenstalk's client, able to send the next reserve along with the current command.

    A broker finishes a job (delete / release / bury) and then reserves the next one: two
    round trips to the server per job that can be one. ``reserve_next(timeout)`` makes the
    next command go out in the same write as ``reserve-with-timeout <timeout>``; that
    command's reply is read as usual, and the following ``reserve(timeout)`` only reads the
    reply already on its way. beanstalkd answers pipelined commands in order, so nothing
    else may be sent in between (a programming error, raised as ``RuntimeError``).

    It hooks greenstalk's ``_send_cmd``, through which every command goes (greenstalk 2.x,
    pinned below 3 for this reason).
    """

    def __init__(
        self, sock: socket.socket, *, use: str, watch: str, io_timeout: float | None = None
    ) -> None:
        self._next = b""
        self._in_flight: bytes | None = None
        self._io_timeout = io_timeout
        self._lines = LineReader(sock, io_timeout)
        super().__init__(sock, encoding=None, use=use, watch=watch)
        # greenstalk made a socket.makefile() reader before use/watch; ours replaces it
        # (their replies went through ``_send_cmd``, which reads from ``_lines``).
        self._reader.close()
        self._reader = self._lines  # type: ignore[assignment]

    def reserve_next(self, timeout: int) -> None:
        """Send ``reserve-with-timeout <timeout>`` together with the next command."""
        self._next = b"reserve-with-timeout %d" % timeout

    @property
    def reserve_in_flight(self) -> bool:
        """A reserve was sent whose reply has not been read yet."""
        return self._in_flight is not None

    def reply_ready(self, wait: float) -> bool:
        """The reply to a reserve sent ahead arrives within ``wait`` seconds (or is here)."""
        if self._in_flight is None:
            return False
        if self._lines.buffered:
            return True  # usually: it came in the same segment as the reply before it
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        try:
            return bool(poller.poll(max(0, int(wait * 1000))))
        except OSError:
            return False

    # reserve, stats-job and the reply parsing below run between a job's reservation and
    # the start of its command, once per job: each is greenstalk's in fewer Python calls
    # (its reserve takes nine, through generic helpers; a call there costs microseconds,
    # the interpreter's caches being cold after the command ran).

    def reserve(self, timeout: int | None = None) -> greenstalk.Job[bytes]:
        """greenstalk's ``reserve`` (same replies, same exceptions)."""
        cmd = b"reserve" if timeout is None else b"reserve-with-timeout %d" % timeout
        job_id, size = self._send_cmd(cmd, b"RESERVED")  # ValueError if not two values
        return greenstalk.Job(int(job_id), self._read_chunk(int(size)))

    def stats_job(self, job: greenstalk.JobOrID[bytes]) -> greenstalk.StatsJob:
        """greenstalk's ``stats_job``, with ``parse_stats`` for the reply (see there)."""
        job_id = job.id if isinstance(job, greenstalk.Job) else job
        (size,) = self._send_cmd(b"stats-job %d" % job_id, b"OK")
        return cast(greenstalk.StatsJob, parse_stats(self._read_chunk(int(size))))

    def _read_chunk(self, size: int) -> bytes:
        data = self._lines.read(size + 2)
        if len(data) != size + 2 or data[-2:] != b"\r\n":
            raise ConnectionError("Unexpected EOF reading chunk")
        return data[:-2]

    def _send_cmd(self, cmd: bytes, expected: bytes) -> list[bytes]:
        if self._in_flight is not None:
            if cmd != self._in_flight:
                raise RuntimeError(f"{cmd!r} sent while {self._in_flight!r} is unanswered")
            self._in_flight = None  # already sent: only its reply is read
        elif self._next:
            follow, self._next = self._next, b""
            # Marked before the write: whatever happens to this command, its follower
            # was sent (or the connection is broken and gets dropped).
            self._in_flight = follow
            self._send(cmd + b"\r\n" + follow + b"\r\n")
        else:
            self._send(cmd + b"\r\n")
        line = self._lines.readline()
        if line[-2:] == b"\r\n":
            values = line.split()  # splitting on whitespace drops the CRLF too
            if values and values[0] == expected:
                return values[1:]
        # An error reply, EOF or anything odd: greenstalk's parser raises what it means.
        return greenstalk._parse_response(line, expected)

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except BlockingIOError:  # the kernel's send timeout (``set_io_timeout``)
            raise TimeoutError(f"server not reading for {self._io_timeout:g}s") from None


def parse_stats(body: bytes) -> dict[str, int | str]:
    """A stats reply's YAML (``---`` then ``key: value`` lines) as greenstalk parses it:
    integers as ``int``, other values as ``str`` without surrounding double quotes.

    Why not greenstalk's parser: it tries ``int()`` on every value and catches the
    ``ValueError``, twice per ``stats-job`` (``tube``, ``state``), which costs more than the
    rest of the parse where a broker runs it, between reserving a job and starting it.
    """
    text = body.decode("ascii")
    if not text.startswith("---\n"):
        raise ValueError(f"not a stats reply: {text[:40]!r}")
    stats: dict[str, int | str] = {}
    for line in text[4:].splitlines():
        key, sep, value = line.partition(": ")
        if not sep:
            raise ValueError(f"bad stats line: {line!r}")
        if value.isdigit() or (value[:1] == "-" and value[1:].isdigit()):
            stats[key] = int(value)
        elif len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            stats[key] = value[1:-1]
        else:
            stats[key] = value
    return stats


class LineReader:
    """Replies off a socket, for greenstalk (``readline``, ``read``, ``close``).

    Instead of ``socket.makefile()``: the bytes buffered here are known (``buffered``),
    so asking whether a pipelined reply is already in costs no system call, and a read is
    one ``recv`` without the file layers around it. Like ``makefile``, a closed connection
    gives a short or empty result, which greenstalk then rejects.
    """

    def __init__(self, sock: socket.socket, io_timeout: float | None = None) -> None:
        self._sock = sock
        self._io_timeout = io_timeout
        self._buf = b""

    def _recv(self, size: int) -> bytes:
        try:
            return self._sock.recv(size)
        except BlockingIOError:  # the kernel's receive timeout (``set_io_timeout``)
            raise TimeoutError(f"no reply from the server in {self._io_timeout:g}s") from None

    @property
    def buffered(self) -> int:
        """Bytes received but not read yet."""
        return len(self._buf)

    def readline(self) -> bytes:
        """Up to and including the next ``\\n`` (less only at end of stream)."""
        buf = self._buf
        end = buf.find(b"\n")
        while end < 0:
            searched = len(buf)
            chunk = self._recv(RECV_SIZE)
            if not chunk:
                self._buf = b""
                return buf
            buf += chunk
            end = buf.find(b"\n", searched)
        self._buf = buf[end + 1 :]
        return buf[: end + 1]

    def read(self, size: int) -> bytes:
        """``size`` bytes (less only at end of stream)."""
        have = len(self._buf)
        if have >= size:
            data, self._buf = self._buf[:size], self._buf[size:]
            return data
        # A big job body comes in many pieces: join them once.
        parts = [self._buf]
        while have < size:
            chunk = self._recv(max(RECV_SIZE, size - have))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        buf = b"".join(parts)
        self._buf = buf[size:]
        return buf[:size]

    def close(self) -> None:
        """Nothing to release: the socket belongs to the client."""
        self._buf = b""


class Stopped(Exception):
    """The stop event was set while (re)connecting; the owner should wind down."""


class HealingConnection:
    """A lazily (re)connected greenstalk client for one owner (``where``, e.g. ``mail:0``).

    ``watch``: the one tube to watch (``default`` is ignored unless it is that tube);
    ``use``: the tube to use. Both are restored after every reconnect.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        where: str,
        stop: threading.Event,
        watch: str | None = None,
        use: str | None = None,
        io_timeout: float = 30.0,
        max_wait: float = 5.0,
        observer: Observer | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.where = where
        self.stop = stop
        self._watch = watch
        self._use = use
        self._io_timeout = io_timeout
        self._max_wait = max_wait
        self._observer = observer or Observer()
        self._client: Client | None = None
        self._sock: socket.socket | None = None
        self._ever_connected = False
        self.connected = threading.Event()  # set while a connection is up

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def client(self) -> Client:
        """The connected client, connecting (with retries) first if needed; or ``Stopped``."""
        if self._client is not None:
            return self._client
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(CONNECTION_ERRORS),
            wait=tenacity.wait_exponential_jitter(multiplier=0.1, max=self._max_wait, jitter=0.2),
            stop=lambda _state: self.stop.is_set(),
            sleep=self._sleep,
            before_sleep=self._log_failure,
            reraise=True,
        )
        try:
            client = retrying(self._connect)
        except CONNECTION_ERRORS as e:  # only when the stop event ended the retries
            raise Stopped(str(e)) from e
        if self._ever_connected:
            log.info("%s: reconnected to %s", self.where, self.address)
            self._observer.reconnected(self.where, self.address)
        else:
            log.debug("%s: connected to %s", self.where, self.address)
        self._ever_connected = True
        self._client = client
        self.connected.set()
        return client

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)  # a stop request cuts the back-off short

    def _connect(self) -> Client:
        if self.stop.is_set():
            raise Stopped("stopping")
        sock = socket.create_connection((self.host, self.port), timeout=self._io_timeout)
        try:
            # Requests are small and answered one at a time: never let Nagle hold them.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The kernel enforces the I/O timeout (a silent server fails a read with
            # EAGAIN, an OSError): with a Python-level timeout every send and recv would
            # first cost a poll().
            set_io_timeout(sock, self._io_timeout)
            sock.settimeout(None)
            watch = self._watch if self._watch is not None else greenstalk.DEFAULT_TUBE
            use = self._use if self._use is not None else greenstalk.DEFAULT_TUBE
            client = Client(sock, use=use, watch=watch, io_timeout=self._io_timeout)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        return client

    def abort(self) -> None:
        """Cut the connection under a blocked call (from another thread): it fails at once.

        The server sees the connection close and takes back any job reserved on it.
        """
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _log_failure(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "%s: cannot connect to %s (%s); retrying in %.1fs (attempt %d)",
            self.where,
            self.address,
            exc or "unknown error",
            delay,
            state.attempt_number,
        )

    def drop(self, reason: object = None) -> None:
        """Forget the current connection (it failed); the next ``client()`` reconnects."""
        client, self._client = self._client, None
        self._sock = None
        self.connected.clear()
        if client is None:
            return
        if reason is not None:
            log.warning("%s: connection to %s lost: %s", self.where, self.address, reason)
        with contextlib.suppress(OSError):
            client.close()

    def close(self) -> None:
        """Close the connection for good (on shutdown)."""
        client, self._client = self._client, None
        self._sock = None
        self.connected.clear()
        if client is not None:
            with contextlib.suppress(OSError):
                client.close()
