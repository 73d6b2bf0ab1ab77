"""A fake beanstalkd that answers as a broken or hostile server would, for ctl's tests.

It listens on 127.0.0.1 (port 0) in a thread. Each command word maps to what the server
does: bytes to send back, or a function given the connection (to trickle, flood or hang
up). ``use`` is answered as beanstalkd would unless mapped; any other command gets
``UNKNOWN_COMMAND``. The time of the first connection is kept, so a test can measure how
long the command took once it reached the server.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

#: What the server does on a command: bytes to send, or a function given the connection and
#: the event set when the test ends (a trickle or a flood stops then, or when the client
#: goes away).
Act = bytes | Callable[[socket.socket, threading.Event], None]
CHUNK = b"A" * 2**20


def trickle(head: bytes, every: float) -> Act:
    """``head`` then one byte every ``every`` seconds."""

    def act(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        while not stop.wait(every):  # the hostile server's own pace
            conn.sendall(b"x")

    return act


def flood(head: bytes, total: int) -> Act:
    """``head`` then ``total`` bytes of ``A`` (no newline)."""

    def act(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        for _ in range(total // len(CHUNK)):
            if stop.is_set():
                return
            conn.sendall(CHUNK)

    return act


def hang_up(head: bytes) -> Act:
    """``head`` (part of a reply), then close the connection."""

    def act(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        conn.shutdown(socket.SHUT_RDWR)  # the fd stays open while a makefile holds it

    return act


def stats_body(lines: bytes) -> bytes:
    """An ``OK <n>`` reply carrying ``---`` and ``lines`` as its YAML."""
    body = b"---\n" + lines
    return b"OK %d\r\n%b\r\n" % (len(body), body)


class HostileServer:
    """The fake server; ``with`` starts and stops it."""

    def __init__(self, acts: dict[bytes, Act]) -> None:
        self.acts = acts
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.first_connection: float | None = None
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close would not)
        self._listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._thread.join(10)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._listener.accept()
                if self.first_connection is None:
                    self.first_connection = time.monotonic()
                self._conns.append(conn)
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with contextlib.suppress(OSError):
            while line := reader.readline():
                word, *args = line.split()
                if word == b"put":
                    reader.read(int(args[-1]) + 2)
                act = self.acts.get(word)
                if act is None:
                    using = word == b"use"
                    conn.sendall(b"USING %b\r\n" % args[0] if using else b"UNKNOWN_COMMAND\r\n")
                elif isinstance(act, bytes):
                    conn.sendall(act)
                else:
                    act(conn, self._stop)
                    return
