"""``connection``: the reply reader and the kernel-enforced I/O timeout.

Real sockets throughout: a socketpair for the reader, a listening socket that accepts and
never answers for the timeout. (``reply_ready`` is tested with pipelining, against both
servers.)
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cmdstalk_py.connection import Client, Connection, LineReader, set_io_timeout


def test_reader_splits_lines_and_bodies_whatever_the_segments() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader = LineReader(ours)
        theirs.sendall(b"RESERVED 7 5\r\nhel")
        assert reader.readline() == b"RESERVED 7 5\r\n"
        assert reader.buffered == 3
        theirs.sendall(b"lo\r\nDELE")
        assert reader.read(7) == b"hello\r\n"
        assert reader.buffered == 4
        theirs.sendall(b"TED\r\nNOT_FOUND\r\n")
        assert reader.readline() == b"DELETED\r\n"
        assert reader.readline() == b"NOT_FOUND\r\n"
        assert reader.buffered == 0
        # End of stream: what is left, then nothing (greenstalk rejects both).
        theirs.sendall(b"PARTIAL")
        theirs.shutdown(socket.SHUT_WR)
        assert reader.readline() == b"PARTIAL"
        assert reader.readline() == b""
        assert reader.read(10) == b""


def test_reader_reads_a_body_larger_than_one_receive() -> None:
    ours, theirs = socket.socketpair()
    body = bytes(range(256)) * 8192 + b"\r\n"  # 2 MiB + CRLF, many recv calls
    sender = threading.Thread(target=theirs.sendall, args=(b"OK %d\r\n" % (len(body) - 2) + body,))
    with ours, theirs:
        sender.start()
        reader = LineReader(ours)
        assert reader.readline() == b"OK %d\r\n" % (len(body) - 2)
        assert reader.read(len(body)) == body
        sender.join(10)
        assert reader.buffered == 0


@contextmanager
def silent_server() -> Iterator[tuple[str, int]]:
    """Accepts connections and reads whatever comes, but never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


def test_a_silent_server_fails_a_command_after_the_io_timeout() -> None:
    with silent_server() as (host, port):
        sock = socket.create_connection((host, port), timeout=5)
        set_io_timeout(sock, 0.3)
        sock.settimeout(None)  # the kernel's timeout alone, as Connection sets it up
        client = Client(sock, use="default", watch="default", io_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(TimeoutError) as raised:
            client.stats()
        waited = time.monotonic() - started
        client.close()
    # The line a broker logs when it drops the connection.
    assert str(raised.value) == "no reply from the server in 0.3s"
    assert 0.25 <= waited < 5


def test_connection_sets_the_io_timeout_on_its_sockets() -> None:
    with silent_server() as (host, port):
        connection = Connection(host, port, where="t:0", stop=threading.Event(), io_timeout=0.3)
        client = connection.client()  # default tubes: nothing to send while connecting
        try:
            with pytest.raises(TimeoutError) as raised:
                client.stats()
        finally:
            connection.close()
    # The kernel's timeout, not a Python-level one (that one says "timed out").
    assert str(raised.value) == "no reply from the server in 0.3s"

