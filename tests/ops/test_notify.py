"""sd_notify over a real AF_UNIX datagram socket, by path and in the abstract namespace."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator

import pytest

from cmdstalk_py.ops.systemd import SystemdNotifier


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def notify_socket() -> Iterator[tuple[str, socket.socket]]:
    """A bound datagram socket in a short temporary directory (sun_path is 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="nfy") as d:
        path = os.path.join(d, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(5)
        try:
            yield path, sock
        finally:
            sock.close()


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, socket.socket]]:
    name = f"cmdstalk-test-{os.getpid()}-{os.urandom(4).hex()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    try:
        yield "@" + name, sock
    finally:
        sock.close()


def messages(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().splitlines()


def test_ready_and_stopping(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    n = SystemdNotifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    n.ready()
    assert "READY=1" in messages(sock)
    n.stopping()
    got = messages(sock)
    assert "STOPPING=1" in got and any(m.startswith("STATUS=stopping") for m in got)


def test_abstract_namespace(abstract_socket: tuple[str, socket.socket]) -> None:
    name, sock = abstract_socket
    n = SystemdNotifier({"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "1000000"})
    n.ready()
    assert "READY=1" in messages(sock)
    n.heartbeat()
    assert "WATCHDOG=1" in messages(sock)


def test_watchdog_rate_is_half_the_period(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    clock = FakeClock()
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    n = SystemdNotifier(env, clock=clock)
    assert n.watchdog_interval == 1.0
    n.heartbeat()
    assert "WATCHDOG=1" in messages(sock)
    clock.now += 0.5
    n.heartbeat()  # too early: nothing is sent, so the marker is the next datagram
    n.notify("MARK=1")
    assert messages(sock) == ["MARK=1"]
    clock.now += 0.5
    n.heartbeat()
    assert "WATCHDOG=1" in messages(sock)


def test_status_updates_ride_on_heartbeats(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    clock = FakeClock()
    n = SystemdNotifier({"NOTIFY_SOCKET": path}, clock=clock)
    n.ready()
    messages(sock)
    n.broker_busy("t", 0, True)
    n.broker_busy("t", 1, False)
    n.heartbeat()  # status changed, but the READY status is younger than the interval
    n.notify("MARK=1")
    assert messages(sock) == ["MARK=1"]
    clock.now += 5
    n.heartbeat()
    assert messages(sock) == ["STATUS=0 jobs finished, 1/2 brokers busy"]


def test_watchdog_of_another_pid_is_ignored(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}
    n = SystemdNotifier(env)
    assert n.watchdog_interval is None
    n.heartbeat()
    n.notify("MARK=1")
    assert messages(sock)[0] != "WATCHDOG=1"


def test_without_notify_socket_everything_is_a_no_op() -> None:
    n = SystemdNotifier({"WATCHDOG_USEC": "1000000"})
    assert not n.enabled
    assert n.notify("READY=1") is False
    n.ready()
    n.heartbeat()
    n.stopping()


def test_missing_socket_never_raises() -> None:
    n = SystemdNotifier({"NOTIFY_SOCKET": "/nonexistent/dir/notify.sock"})
    assert n.enabled
    assert n.notify("READY=1") is False
    n.ready()
    n.stopping()


def test_environment_is_cleared_for_job_commands(
    notify_socket: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sock = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    n = SystemdNotifier()
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} & set(os.environ)
    assert n.watchdog_interval == 1.5
    n.ready()
    assert "READY=1" in messages(sock)
