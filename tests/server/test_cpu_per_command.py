"""CPU per command, counted rather than timed: Python-level calls the server makes.

The server's cost per command is mostly Python function calls (and generator resumes),
so their count per command is a measure of its CPU that a shared, noisy machine cannot
blur. The server here is the real one (``Assembly``: engine, loop, ``net.Server``) on a
real TCP socket, its loop driven by the test in this thread under ``sys.setprofile``.
The bounds sit just above what the server costs now, well below what issue #15's
restructuring cost at first (a turn pulling events one generator resume at a time, a put
as two events, a reserve's bookkeeping in four calls); the counts and the throughput
figures, before and after, are in benchmarks/README.md.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from cmdstalk_py.server.assembly import Assembly
from cmdstalk_py.server.config import ServerConfig

BODY = b"x" * 32
JOBS = 2000
#: Calls per command at most (see the module docstring for what they were before).
PUT_CALLS = 9.5
DRAIN_CALLS = 9.8
CYCLE_CALLS = 19.5


class Driven:
    """A server whose loop runs in this thread, and one client connected to it."""

    def __init__(self, assembly: Assembly) -> None:
        self.assembly = assembly
        host, port = assembly.server.listen_tcp("127.0.0.1", 0)
        self.client = socket.create_connection((host, port), timeout=10)
        self.buf = b""
        self.calls = 0
        deadline = time.monotonic() + 10
        while not assembly.server.connections:
            assert time.monotonic() < deadline, "the server did not accept"
            assembly.loop.run_once(block=False)

    def _count(self, _frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":  # Python functions and generator resumes, not C calls
            self.calls += 1

    def exchange(self, data: bytes, replies: Callable[[bytes], bool]) -> int:
        """Send ``data``, run the server until ``replies`` says all came; the calls made."""
        self.client.sendall(data)
        self.calls = 0
        deadline = time.monotonic() + 30
        self.client.setblocking(False)
        try:
            while not replies(self.buf):
                assert time.monotonic() < deadline, f"no complete reply: {self.buf[-200:]!r}"
                sys.setprofile(self._count)
                try:
                    self.assembly.loop.run_once(block=False)
                finally:
                    sys.setprofile(None)
                with contextlib.suppress(BlockingIOError):
                    self.buf += self.client.recv(1 << 20)
        finally:
            self.client.setblocking(True)
        return self.calls


@pytest.fixture
def driven() -> Iterator[Driven]:
    assembly = Assembly.open(ServerConfig())
    try:
        d = Driven(assembly)
        try:
            yield d
        finally:
            d.client.close()
    finally:
        assembly.close()


def _lines(count: int) -> Callable[[bytes], bool]:
    return lambda buf: buf.count(b"\r\n") >= count


def _put() -> bytes:
    return b"put 0 0 60 %d\r\n%s\r\n" % (len(BODY), BODY)


def test_pipelined_puts(driven: Driven) -> None:
    calls = driven.exchange(_put() * JOBS, _lines(JOBS))
    assert driven.buf.count(b"INSERTED") == JOBS
    assert calls / JOBS <= PUT_CALLS, calls / JOBS


def test_pipelined_reserves_and_deletes(driven: Driven) -> None:
    driven.exchange(_put() * JOBS, _lines(JOBS))
    driven.buf = b""
    work = b"".join(b"reserve-with-timeout 0\r\ndelete %d\r\n" % i for i in range(1, JOBS + 1))
    # A RESERVED reply is two lines (the body has its own CRLF), DELETED one.
    calls = driven.exchange(work, _lines(3 * JOBS))
    assert driven.buf.count(b"DELETED") == JOBS
    assert calls / (2 * JOBS) <= DRAIN_CALLS, calls / (2 * JOBS)


def test_request_response_cycles(driven: Driven) -> None:
    cycles = 300
    calls = 0
    for i in range(1, cycles + 1):
        driven.buf = b""
        calls += driven.exchange(_put(), _lines(1))
        driven.buf = b""
        calls += driven.exchange(b"reserve-with-timeout 0\r\n", _lines(2))
        driven.buf = b""
        calls += driven.exchange(b"delete %d\r\n" % i, _lines(1))
        assert driven.buf == b"DELETED\r\n"
    assert calls / (3 * cycles) <= CYCLE_CALLS, calls / (3 * cycles)
