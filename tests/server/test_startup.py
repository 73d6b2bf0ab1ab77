"""Start-up: ``cmdstalk-server`` reads its flags and listens before it loads anything heavy,
serving needs neither ``typing`` nor ``re`` nor ``argparse``, and a command sent the moment
the port accepts is answered correctly. How fast is measured by benchmarks/server_startup.py
(against ``python -c pass`` and beanstalkd in the same run), never asserted here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmdstalk_py.server import flags
from tests.helpers import free_port

#: A generous bound for anything to happen on a loaded machine (not a speed target).
PATIENCE = 60.0


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-p", "11400"],
        ["-l", "0.0.0.0", "-p", "007", "-z", "70000", "-V"],
        ["-l", "unix:/tmp/x.sock", "-b", "/var/lib/q", "-f", "0", "-s", "4096", "-V", "-V"],
        ["-b", "", "-F", "-p", "1", "-p", "2", "-l", "a", "-l", "::1"],
        ["-f", "10", "-F", "-b", "d"],
        ["-F", "-f", "10"],
        ["-p", "+1"], ["-p", "1_0"], ["-z", "٣"], ["-v"], ["--version", "-p", "5"],
    ],
)
def test_the_plain_reader_agrees_with_argparse(argv: list[str]) -> None:
    read = flags.read(argv)
    assert read is not None
    assert read == flags.parse(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["-h"], ["--help"], ["-p11300"], ["-p", "70000"], ["-p", "http"], ["-z", "-5"],
        ["-l"], ["-b"], ["stray"], ["--"], ["-x"], ["-VF"], ["-VV"], ["-f", "soon"], ["-p=5"],
        ["--vers"],
    ],
)
def test_anything_unusual_is_left_to_argparse(argv: list[str]) -> None:
    assert flags.read(argv) is None


_WORDS = st.sampled_from(
    ["-l", "-p", "-z", "-b", "-f", "-F", "-s", "-V", "-v", "--version", "0", "007", "11300",
     "70000", "x", "", "-", "-1", "+2", "unix:/s", "::1", "٣", "1_0", "-VV", "-p5"]
)


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(_WORDS, max_size=8))
def test_whatever_the_plain_reader_takes_argparse_reads_the_same(argv: list[str]) -> None:
    read = flags.read(argv)
    if read is not None:
        assert read == flags.parse(argv), argv


def test_nothing_heavy_is_loaded_before_listening() -> None:
    # Everything before listen() delays the first connection; on a busy machine each
    # module costs several times its idle import time.
    probe = (
        "import sys\n"
        "from cmdstalk_py.server import cli, flags, listen\n"
        "f = flags.read(['-l', 'localhost', '-p', '0', '-V'])\n"
        "assert f is not None\n"
        "listen.bind_listener(f.listen, f.port).close()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=PATIENCE,
        check=True,
    )
    loaded = set(out.stdout.split())
    heavy = {"argparse", "typing", "re", "enum", "socket", "encodings.idna", "signal",
             "cmdstalk_py.server.engine", "cmdstalk_py.loop.core"}
    assert not loaded & heavy, sorted(loaded & heavy)


def imported_by_serving() -> set[str]:
    """The modules the server imports up to its first reply (``-X importtime``), beyond
    what ``python -c pass`` imports here (site and its .pth files vary between machines)."""

    def names(stderr: str) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
                if line.startswith("import time:") and "|" in line}

    bare = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"],
                          capture_output=True, text=True, timeout=PATIENCE, check=True)
    with server("-X", "importtime") as (proc, port):
        with connect_when_accepting(proc, port) as s:
            assert talk(s, b"list-tube-used\r\n") == b"USING default\r\n"
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=PATIENCE)
    return names(err) - names(bare.stderr)


def test_serving_imports_neither_typing_nor_re_nor_argparse() -> None:
    loaded = imported_by_serving()
    assert "cmdstalk_py.server.engine" in loaded  # the probe saw the server's imports
    unwanted = {"typing", "re", "argparse", "logging", "threading", "dataclasses",
                "cmdstalk_py.server.binlog", "cmdstalk_py.server.embedded"}
    assert not loaded & unwanted, sorted(loaded & unwanted)


def talk(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    out = b""
    while not out.endswith(b"\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


@contextmanager
def server(*interpreter_flags: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``python [interpreter flags] -m cmdstalk_py.server -p PORT``, killed at the end."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, *interpreter_flags, "-m", "cmdstalk_py.server", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        yield proc, port
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def connect_when_accepting(proc: subprocess.Popen[str], port: int) -> socket.socket:
    """The first connection the server accepts, tried back to back from its spawn on."""
    deadline = time.monotonic() + PATIENCE
    while True:
        assert proc.poll() is None, "the server exited"
        assert time.monotonic() < deadline, f"nothing accepted on {port}"
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            time.sleep(0.001)
            continue
        s.settimeout(PATIENCE)
        return s


@pytest.mark.slow
def test_a_command_sent_as_soon_as_the_port_accepts_is_answered() -> None:
    # Test suites spawn a server per test and talk to it soon after (greenstalk's after
    # 100 ms); here, the moment it accepts. While the server is still loading, the command
    # waits in the socket, and its timeout starts once it is read: the answer comes no
    # sooner than a second after it was sent.
    for _ in range(3):
        with server() as (proc, port), connect_when_accepting(proc, port) as s:
            sent = time.monotonic()
            assert talk(s, b"reserve-with-timeout 1\r\n") == b"TIMED_OUT\r\n"
            assert time.monotonic() - sent >= 1.0
            assert talk(s, b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
            assert talk(s, b"list-tube-used\r\n") == b"USING default\r\n"

