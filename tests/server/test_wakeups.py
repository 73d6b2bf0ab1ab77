"""A reserve blocked on a real socket gets its reply whatever ends the wait.

The engine answers a blocked reserve with a value (a job, TIMED_OUT, DEADLINE_SOON); the
dispatcher renders it and the network layer sends it. Each test blocks a worker in a
reserve over TCP on an EmbeddedServer and ends the wait another way.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from cmdstalk_py.server.embedded import EmbeddedServer
from tests.helpers import wait_until


class Peer:
    """A raw client socket reading one reply at a time (data chunks included)."""

    def __init__(self, srv: EmbeddedServer) -> None:
        self.sock = socket.create_connection(srv.address, timeout=60)
        self.buf = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def ask(self, line: bytes, body: bytes | None = None) -> bytes:
        self.send(line, body)
        return self.reply()

    def send(self, line: bytes, body: bytes | None = None) -> None:
        data = line + b"\r\n" + (b"" if body is None else body + b"\r\n")
        self.sock.sendall(data)

    def reply(self) -> bytes:
        """One reply line; a data chunk that follows is appended after a space."""
        line = self._line()
        if not line.startswith((b"RESERVED ", b"OK ")):
            return line
        size = int(line.split(b" ")[-1])
        while len(self.buf) < size + 2:
            self._fill()
        data, self.buf = self.buf[:size], self.buf[size + 2 :]
        return line + b" " + data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def srv() -> Iterator[EmbeddedServer]:
    with EmbeddedServer() as server:
        yield server


@pytest.fixture
def peers(srv: EmbeddedServer) -> Iterator[tuple[Peer, Peer]]:
    worker, other = Peer(srv), Peer(srv)
    try:
        yield worker, other
    finally:
        worker.close()
        other.close()


def block(worker: Peer, other: Peer, line: bytes = b"reserve") -> None:
    """Send ``line`` (a reserve) from ``worker`` and wait until the server has it waiting."""
    worker.send(line)
    wait_until(lambda: b"current-waiting: 1\n" in other.ask(b"stats"), timeout=60,
               message="the worker waiting")


def test_a_put_serves_it(peers: tuple[Peer, Peer]) -> None:
    worker, other = peers
    block(worker, other)
    assert other.ask(b"put 0 0 60 2", b"hi") == b"INSERTED 1"
    assert worker.reply() == b"RESERVED 1 2 hi"


def test_a_release_serves_it(peers: tuple[Peer, Peer]) -> None:
    worker, other = peers
    other.ask(b"put 0 0 60 1", b"a")
    assert other.ask(b"reserve") == b"RESERVED 1 1 a"
    block(worker, other)
    assert other.ask(b"release 1 0 0") == b"RELEASED"
    assert worker.reply() == b"RESERVED 1 1 a"


def test_kicks_serve_it(peers: tuple[Peer, Peer]) -> None:
    worker, other = peers
    other.ask(b"put 0 0 60 1", b"b")
    other.ask(b"reserve")
    assert other.ask(b"bury 1 0") == b"BURIED"
    block(worker, other)
    assert other.ask(b"kick 1") == b"KICKED 1"
    assert worker.reply() == b"RESERVED 1 1 b"
    other.ask(b"put 0 100 60 1", b"d")
    block(worker, other)
    assert other.ask(b"kick-job 2") == b"KICKED"
    assert worker.reply() == b"RESERVED 2 1 d"


def test_an_expiry_elsewhere_serves_it(peers: tuple[Peer, Peer]) -> None:
    worker, other = peers
    other.ask(b"put 0 0 1 1", b"e")
    other.ask(b"reserve")
    block(worker, other)
    assert worker.reply() == b"RESERVED 1 1 e"


def test_its_timeout_and_its_deadline_end_it(peers: tuple[Peer, Peer]) -> None:
    worker, other = peers
    block(worker, other, b"reserve-with-timeout 1")
    assert worker.reply() == b"TIMED_OUT"
    worker.ask(b"put 0 0 3 1", b"f")
    assert worker.ask(b"reserve") == b"RESERVED 1 1 f"
    block(worker, other, b"reserve-with-timeout 30")
    assert worker.reply() == b"DEADLINE_SOON"
