"""Fairness under pipelining (issue #16 item 10), on real server processes and sockets.

A client that pipelines thousands of commands in one write must not hold up the others:
the server serves its connections in turn, a bounded amount of work each, so another
client is answered again and again while the burst runs. Large states (many tubes
watched, many reservations held) give the right replies. How long anything takes, and
whether a command's cost grows with the connection's state, is measured by
``benchmarks/server.py --fairness`` (tested to run here), never asserted.
"""

from __future__ import annotations

import importlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import beanstalkd_path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# The benchmark's own modules (run as scripts from benchmarks/, not a package mypy sees).
sys.path.insert(0, str(BENCHMARKS))
try:
    server_fairness: Any = importlib.import_module("server_fairness")
    server_procs: Any = importlib.import_module("server_procs")
finally:
    sys.path.remove(str(BENCHMARKS))
ServerKind = server_procs.ServerKind
measure = server_fairness.measure

#: Seconds after which a test gives up waiting whatever the CPU: a hang, not slowness.
HANG = 100.0
BUNDLED: Any = ServerKind("bundled", (sys.executable, "-m", "cmdstalk_py.server"))
needs_beanstalkd = pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")


@contextmanager
def running(kind: Any) -> Iterator[Any]:
    server = server_procs.start_server(kind)
    try:
        yield server
    finally:
        server.stop()


def real_kind() -> Any:
    kind = server_procs.beanstalkd_kind()
    assert kind is not None
    return kind


def read_lines(sock: socket.socket, count: int, deadline: float) -> bytes:
    """``count`` reply lines, or fail at ``deadline`` (monotonic): a hang, not slowness."""
    data = b""
    while (seen := data.count(b"\r\n")) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"{seen} of {count} replies before the deadline"
        sock.settimeout(min(left, 0.5))
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def test_watching_many_tubes_answers_every_watch() -> None:
    count = 100_000
    burst = b"".join(b"watch t-%d\r\n" % i for i in range(count))
    with running(BUNDLED) as server, socket.create_connection(server.address) as sock:
        replies = pipeline(sock, burst, count)
        assert replies.endswith(b"WATCHING %d\r\n" % (count + 1))
        sock.sendall(b"list-tubes-watched\r\n")
        head = read_lines(sock, 1, time.monotonic() + HANG)
        assert head.startswith(b"OK ")


def pipeline(sock: socket.socket, data: bytes, replies: int) -> bytes:
    """Write ``data`` from a thread while reading its ``replies`` lines here."""
    writer = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    writer.start()
    try:
        return read_lines(sock, replies, time.monotonic() + HANG)
    finally:
        writer.join(HANG)


def test_polling_while_holding_many_reservations_answers_every_poll() -> None:
    # Each reserve that finds no job asks whether a reservation is about to time out
    # (DEADLINE_SOON): with 20,000 held, none is.
    count = 20_000
    poll = b"reserve-with-timeout 0\r\n" * count
    with running(BUNDLED) as server, socket.create_connection(server.address) as sock:
        pipeline(sock, b"put 0 0 600 1\r\nx\r\n" * count, count)
        reserved = pipeline(sock, poll, 2 * count)
        assert reserved.count(b"RESERVED ") == count
        polls = pipeline(sock, poll, count)
        assert polls == b"TIMED_OUT\r\n" * count


WATCH_SCRIPT = (
    b"watch a\r\nwatch b\r\nwatch c\r\nwatch d\r\nwatch b\r\nignore b\r\nignore default\r\n"
    b"watch e\r\nignore zz\r\nignore a\r\nwatch b\r\nignore e\r\nlist-tubes-watched\r\n"
)


def watch_script_replies(kind: Any) -> bytes:
    with running(kind) as server, socket.create_connection(server.address) as sock:
        sock.sendall(WATCH_SCRIPT)
        # One CRLF per reply, and one more ending list-tubes-watched's YAML body.
        return read_lines(sock, WATCH_SCRIPT.count(b"\r\n") + 1, time.monotonic() + HANG)


@needs_beanstalkd
def test_watch_and_ignore_keep_beanstalkds_order() -> None:
    # The watch list is indexed now; its order (1.12 swap-removes on ignore) must not move.
    assert watch_script_replies(BUNDLED) == watch_script_replies(real_kind())


@pytest.mark.slow
def test_a_pipelined_burst_does_not_hold_up_another_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The burst watches 2,000 tubes, then polls them all 5,000 times in the same write:
    # each reserve scans every watched tube (beanstalkd's does too). Before, the server ran
    # every command of a read (256 kB) before it looked at anyone else: the other client
    # was answered once or twice while the burst ran. Now each connection gets a bounded
    # turn (256 commands at most), and the other client is answered between turns.
    tubes, polls = 2_000, 5_000
    watches = b"".join(b"watch w-%d\r\n" % i for i in range(tubes))
    polls_only = server_fairness.burst_bytes
    monkeypatch.setattr(server_fairness, "burst_bytes", lambda b, n: watches + polls_only(b, polls))
    with running(BUNDLED) as server:
        sample = measure(server.address, "reserve-with-timeout 0", tubes + polls)
    assert sample.probe_requests >= 10, sample


@needs_beanstalkd
def test_fairness_benchmark_runs() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "server.py"), "--fairness", "--quick"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = [line for line in lines if line.startswith("worst wait, ")]
    assert len(rows) == 2, proc.stdout
    assert all(" ms " in row and ("PASS" in row or "FAIL" in row) for row in rows), rows
    scaling = [line for line in lines if line.startswith("cpu/cmd, ")]
    assert len(scaling) == 2, proc.stdout
    assert all(("PASS" in row) != ("FAIL" in row) for row in scaling), scaling
