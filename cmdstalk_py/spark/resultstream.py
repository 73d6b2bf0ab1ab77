"""Drain results sent to the driver as they happen, so none vanishes with a lost executor.

A Spark task's return value reaches the driver only when the task ends; an executor that
dies mid-drain took every result of its task with it. Instead each task connects to a
small listener on the driver (:class:`ResultServer`, on the driver's Spark address, port
0) and sends each job's event-log line the moment its broker finishes it; the driver
appends it to the event log at once. The first line of a connection is a per-drain
random token (shipped in the task closure) and the task's partition and attempt number,
so nothing else can write into the log, and a task Spark had to run again is counted.
The brokers' warnings travel the same way, as ``log`` lines (``LOG_PREFIX`` and the
JSON-encoded text: never a JSON object, so never taken for an event), for the driver to
print: an executor's stderr is a file on its machine.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections.abc import Callable
from contextlib import suppress

#: What starts a log line on the wire (an event line starts with ``{``).
LOG_PREFIX = b"log "


class ResultServer:
    """The driver's listener: calls ``on_line(line)`` for every event line, in one thread
    at a time; ``attempts`` counts connections per partition."""

    def __init__(self, host: str, on_line: Callable[[bytes], None]) -> None:
        self.token = secrets.token_hex(16)
        self.on_line = on_line
        self.attempts: dict[int, int] = {}
        self._lock = threading.Lock()
        self._sock = socket.create_server((host, 0))
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, name="drain-results")

    def __enter__(self) -> ResultServer:
        self._accepting.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting, and wait for connections still sending (bounded)."""
        with suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._accepting.join(timeout=5)
        for thread in self._threads:
            thread.join(timeout=10)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            hello = stream.readline().split()
            if len(hello) != 3 or not secrets.compare_digest(hello[0], self.token.encode()):
                return
            with self._lock:
                partition = int(hello[1])
                self.attempts[partition] = self.attempts.get(partition, 0) + 1
            for line in stream:
                if not line.endswith(b"\n"):
                    break  # cut off by a dying executor: not a whole event
                with self._lock:
                    self.on_line(line)


class ResultStream:
    """A task's connection to the driver's :class:`ResultServer`."""

    def __init__(self, address: str, token: str, partition: int, attempt: int) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=30)
        self._lock = threading.Lock()
        self._sock.sendall(f"{token} {partition} {attempt}\n".encode())

    def send(self, line: bytes) -> None:
        """Send one event line (broker threads call this concurrently)."""
        with self._lock:
            self._sock.sendall(line)

    def send_log(self, text: str) -> None:
        """Send one log message (it may span lines: it arrives as one)."""
        self.send(LOG_PREFIX + json.dumps(text).encode() + b"\n")

    def close(self) -> None:
        self._sock.close()


def log_text(line: bytes) -> str | None:
    """The message of a log line; None for an event line."""
    if not line.startswith(LOG_PREFIX):
        return None
    return str(json.loads(line[len(LOG_PREFIX) :]))


def line_fields(line: bytes) -> tuple[str, str, int | None, str]:
    """(tube, outcome, exit_code, server) of an event-log line."""
    record = json.loads(line)
    exit_code = record.get("exit_code")
    return str(record["tube"]), str(record["outcome"]), exit_code, str(record.get("server", ""))
