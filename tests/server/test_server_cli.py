"""``cmdstalk-server`` as a process: flags, signals, the console script."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path

import pytest

from tests.helpers import accepts_connections, free_port, wait_until

SERVER = [sys.executable, "-m", "cmdstalk_py.server"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVER, *args], capture_output=True, text=True, timeout=30)


@contextmanager
def server_process(*args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [*SERVER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.communicate()


def talk(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    out = b""
    while not out.endswith(b"\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def test_help_says_where_it_listens() -> None:
    r = run("-h")
    assert r.returncode == 0
    assert "127.0.0.1" in r.stdout and "all interfaces" in r.stdout
    for flag in ("-l", "-p", "-z", "-V", "-v", "-b", "-f", "-F", "-s"):
        assert flag in r.stdout
    assert run("--help").returncode == 0


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_version(flag: str) -> None:
    r = run(flag)
    assert (r.returncode, r.stdout.strip()) == (0, "cmdstalk-server 1.12")


@pytest.mark.parametrize(
    "args", [["-x"], ["-p", "http"], ["-p", "70000"], ["-z", "-5"], ["stray"], ["-l"]]
)
def test_bad_flags_one_line_exit_2(args: list[str]) -> None:
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cmdstalk-server: "), r.stderr


@pytest.mark.parametrize("args", [["-f", "soon"], ["-f", "-1"], ["-s", "big"], ["-b"]])
def test_bad_durability_flags_one_line_exit_2(args: list[str]) -> None:
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cmdstalk-server: "), r.stderr


def test_durability_flags_without_b_run_in_memory_and_show_s() -> None:
    # As beanstalkd: -f/-F/-s mean nothing without -b, except that stats shows -s.
    port = free_port()
    with server_process("-p", str(port), "-f", "10", "-F", "-s", "5000") as proc:
        wait_until(lambda: accepts_connections("127.0.0.1", port), timeout=60,
                   message="server accepts")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            stats = talk(s, b"stats\r\n")
        assert b"binlog-max-size: 5000\n" in stats
        assert b"binlog-current-index: 0\n" in stats
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_port_in_use_fails_clearly() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        r = run("-p", str(blocker.getsockname()[1]))
    assert r.returncode == 1
    assert "cannot listen" in r.stderr


def test_serves_drains_on_sigusr1_and_exits_0_on_sigterm() -> None:
    port = free_port()
    with server_process("-l", "127.0.0.1", "-p", str(port), "-z", "100") as proc:
        wait_until(lambda: accepts_connections("127.0.0.1", port), timeout=60,
                   message="server accepts")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            assert talk(s, b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
            assert b"max-job-size: 100\n" in talk(s, b"stats\r\n")
            proc.send_signal(signal.SIGUSR1)
            wait_until(lambda: talk(s, b"put 0 0 60 1\r\nx\r\n") == b"DRAINING\r\n",
                       timeout=60, message="drain mode")
            assert b"draining: true" in talk(s, b"stats\r\n")
            assert talk(s, b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 2")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_sigint_exits_0_and_unix_socket_is_removed() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.sock")
        with server_process("-l", f"unix:{path}") as proc:

            def connects() -> bool:
                with socket.socket(socket.AF_UNIX) as s:
                    try:
                        s.connect(path)
                    except OSError:
                        return False
                    return talk(s, b"list-tube-used\r\n") == b"USING default\r\n"

            wait_until(connects, timeout=60, message="unix socket")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 0
        assert not os.path.exists(path)


def test_console_script_serves() -> None:
    # How fast it starts is benchmarks/server_startup.py's business.
    script = Path(sys.executable).parent / "cmdstalk-server"
    cmd = [str(script)] if script.exists() else SERVER
    port = free_port()
    proc = subprocess.Popen([*cmd, "-p", str(port)], start_new_session=True)
    try:
        wait_until(partial(accepts_connections, "127.0.0.1", port), timeout=60,
                   message="accepting")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            assert talk(s, b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_flags_and_the_embedded_server_share_one_set_of_defaults() -> None:
    import inspect

    from cmdstalk_py.server.binlog import BinlogOptions
    from cmdstalk_py.server.config import DEFAULT_HOST, DEFAULT_PORT, ServerConfig
    from cmdstalk_py.server.embedded import EmbeddedServer
    from cmdstalk_py.server.flags import parse

    config = ServerConfig()
    args = parse([])
    assert (args.listen, args.port) == (DEFAULT_HOST, DEFAULT_PORT)
    assert (args.max_job_size, args.fsync_ms, args.binlog_size) == (
        config.max_job_size, config.fsync_ms, config.segment_size,
    )  # fmt: skip
    embedded = inspect.signature(EmbeddedServer).parameters
    assert embedded["host"].default == DEFAULT_HOST
    assert embedded["max_job_size"].default == config.max_job_size
    assert embedded["fsync_ms"].default == config.fsync_ms
    assert embedded["segment_size"].default == config.segment_size
    options = BinlogOptions()
    assert (options.fsync_ms, options.segment_size) == (config.fsync_ms, config.segment_size)
