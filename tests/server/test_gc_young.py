"""The cyclic GC in ``cmdstalk-server``: few young collections under pipelined puts.

A turn holds its framed events alive while the jobs it creates stay, so with CPython
3.11's young threshold (700) a turn of pipelined puts nearly always ended in a
collection, and every tenth one in a middle-generation collection that makes full ones
(over every stored job) come sooner. The server process raises the threshold
(``config.GC_YOUNG_THRESHOLD``). Counted in the real server process (``gc.callbacks``,
written at exit), so a shared, noisy machine cannot blur it.
"""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from tests.helpers import free_port

PUTS = 20_000
IN_FLIGHT = 2000
CHUNK = 500
#: Young collections per 1000 pipelined puts at most (3.11's threshold made over four).
YOUNG_PER_1000 = 2.0

_SERVER = (
    "import atexit, gc, runpy, sys\n"
    "counts = [0, 0, 0]\n"
    "def count(phase, info):\n"
    "    if phase == 'stop':\n"
    "        counts[info['generation']] += 1\n"
    "gc.callbacks.append(count)\n"
    "path = sys.argv[1]\n"
    "atexit.register(lambda: open(path, 'w').write(repr(counts)))\n"
    "sys.argv = ['cmdstalk-server', *sys.argv[2:]]\n"
    "runpy.run_module('cmdstalk_py.server', run_name='__main__')\n"
)


def _connect(port: int, proc: subprocess.Popen[bytes]) -> socket.socket:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "the server exited"
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError:
            assert time.monotonic() < deadline, "the server did not accept"
            time.sleep(0.01)


def _pipeline_puts(sock: socket.socket) -> None:
    put = b"put 0 0 60 32\r\n" + b"x" * 32 + b"\r\n"
    sent = answered = 0
    tail = b""
    deadline = time.monotonic() + 120
    while answered < PUTS:
        assert time.monotonic() < deadline, f"{answered} of {PUTS} answered"
        while sent < PUTS and sent - answered < IN_FLIGHT:
            sock.sendall(put * CHUNK)
            sent += CHUNK
        data = tail + sock.recv(1 << 16)
        assert data, "the server closed the connection"
        lines = data.split(b"\r\n")
        tail = lines.pop()
        assert all(line.startswith(b"INSERTED ") for line in lines), lines[:3]
        answered += len(lines)


def test_pipelined_puts_make_few_young_collections(tmp_path: Path) -> None:
    counts_file = tmp_path / "gc-counts"
    port = free_port()
    argv = [sys.executable, "-c", _SERVER, str(counts_file), "-l", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        with _connect(port, proc) as sock:
            _pipeline_puts(sock)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    young, middle, full = ast.literal_eval(counts_file.read_text())
    assert young / (PUTS / 1000) <= YOUNG_PER_1000, (young, middle, full)
