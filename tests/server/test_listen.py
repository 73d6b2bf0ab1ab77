"""``-l unix:PATH`` and ``-b DIR`` leave other files and other servers alone (issue #16
item 11), on real ``cmdstalk-server`` processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from tests.helpers import wait_until
from tests.server.test_server_cli import server_process, talk


@contextmanager
def short_dir() -> Iterator[str]:
    """A fresh directory with a short path (unix socket paths are limited to ~107 bytes)."""
    d = tempfile.mkdtemp(prefix="cs-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(60)
        try:
            s.connect(path)
        except OSError:
            return False
        return talk(s, b"list-tube-used\r\n") == b"USING default\r\n"


def refused(proc: subprocess.Popen[str]) -> str:
    """The one stderr line of a server that must exit 1 at once (it must not serve)."""
    wait_until(lambda: proc.poll() is not None, timeout=60, message="the server to give up")
    assert proc.returncode == 1
    _, err = proc.communicate()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cmdstalk-server: "), err
    return lines[0]


def test_a_regular_file_at_the_socket_path_is_refused_and_kept() -> None:
    with short_dir() as d:
        path = os.path.join(d, "jobs.sock")
        with open(path, "w") as f:
            f.write("precious\n")
        with server_process("-l", f"unix:{path}") as proc:
            line = refused(proc)
        assert f"cannot listen on unix:{path}" in line and "not a socket" in line, line
        with open(path) as f:
            assert f.read() == "precious\n"


def test_the_socket_of_a_running_server_is_refused_and_kept() -> None:
    with short_dir() as d:
        path = os.path.join(d, "s.sock")
        with server_process("-l", f"unix:{path}"):
            wait_until(lambda: answers(path), timeout=60, message="the first server")
            inode = os.stat(path).st_ino
            with server_process("-l", f"unix:{path}") as second:
                line = refused(second)
            assert "a server is listening" in line, line
            assert os.stat(path).st_ino == inode
            assert answers(path)


def test_a_stale_socket_file_is_replaced() -> None:
    with short_dir() as d:
        path = os.path.join(d, "s.sock")
        with socket.socket(socket.AF_UNIX) as gone:
            gone.bind(path)  # closed without unlinking, as by a server killed -9
        with server_process("-l", f"unix:{path}") as proc:
            wait_until(lambda: answers(path), timeout=60, message="the new server")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        assert not os.path.exists(path)


def test_a_server_refused_by_the_binlog_lock_never_touches_the_running_servers_socket() -> None:
    # The lock is taken before binding: the second server gives up on the lock, naming
    # its holder, before it goes anywhere near the address.
    with short_dir() as d:
        path, binlog = os.path.join(d, "s.sock"), os.path.join(d, "binlog")
        with server_process("-l", f"unix:{path}", "-b", binlog) as first:
            wait_until(lambda: answers(path), timeout=60, message="the first server")
            inode = os.stat(path).st_ino
            with server_process("-l", f"unix:{path}", "-b", binlog) as second:
                line = refused(second)
            assert f"locked by process {first.pid}" in line, line
            assert os.stat(path).st_ino == inode
            assert answers(path)
