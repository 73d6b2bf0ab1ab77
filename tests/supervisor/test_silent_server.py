"""A server that accepts connections but never answers: SIGTERM stays prompt and READY=1
is never sent (it means the server has answered, not merely accepted).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import NotifyListener, notify_listener
from tests.supervisor.conftest import cmdstalk_env, start_cmdstalk

# Well under the I/O timeout (30 s) that a silent server used to cost a stopping cmdstalk.
PROMPT = 5.0


class SilentServer:
    """Accepts every connection on 127.0.0.1 and never sends a byte."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.1)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()
        for conn in self.accepted:
            conn.close()


@contextmanager
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def cmdstalk_notified(
    tmp_path: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[bytes], NotifyListener]]:
    with notify_listener() as notify, (tmp_path / "stderr").open("wb") as err:
        env = cmdstalk_env(NOTIFY_SOCKET=notify.path)
        proc = start_cmdstalk("--cmd", "cat", *args, env=env, stderr=err,
                              stdout=subprocess.DEVNULL)
        try:
            yield proc, notify
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def stop_time(proc: subprocess.Popen[bytes]) -> float:
    """Seconds from one SIGTERM to the process's exit (it must exit 0)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(PROMPT * 4)
    except subprocess.TimeoutExpired:
        pytest.fail(f"cmdstalk still running {PROMPT * 4:.0f}s after SIGTERM")
    assert code == 0
    return time.monotonic() - started


@pytest.mark.parametrize(
    ("args", "connections"),
    [
        (["--tubes", "a,b", "--per-tube", "2"], 4),  # waiting for the replies to watch
        (["--tubes", "default", "--per-tube", "2"], 2),  # the default tube asks nothing else
        (["--all"], 1),  # discovery waiting for list-tubes
    ],
    ids=["tubes", "default-tube", "all"],
)
def test_sigterm_is_prompt_and_ready_never_sent_while_the_server_is_silent(
    tmp_path: Path, args: list[str], connections: int
) -> None:
    with silent_server() as server, cmdstalk_notified(
        tmp_path, "--address", server.address, *args
    ) as (proc, notify):
        wait_until(lambda: len(server.accepted) >= connections, 20,
                   message=f"{connections} connections")
        # Give a wrongly eager READY=1 the time it would need to arrive (it comes within
        # the supervisor's starting tick); the wait ends at once if cmdstalk dies.
        with pytest.raises(AssertionError):
            notify.wait_for("READY=1", proc, timeout=1.0)
        assert proc.poll() is None
        assert stop_time(proc) < PROMPT
        assert "READY=1" not in notify.messages


def syn_sent_to(port: int) -> int:
    """Sockets on this host waiting for the SYN-ACK of 127.0.0.1:``port`` (/proc/net/tcp)."""
    remote = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[2] == remote and row[3] == "02")  # 02: SYN_SENT


def test_sigterm_is_prompt_while_connecting_to_a_host_that_drops_syns(tmp_path: Path) -> None:
    # A full accept queue: Linux drops further SYNs, so connect() waits (up to the 30 s
    # I/O timeout) as it would for a firewalled host.
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        with cmdstalk_notified(
            tmp_path, "--address", f"127.0.0.1:{port}", "--tubes", "a", "--per-tube", "2"
        ) as (proc, notify):
            wait_until(lambda: syn_sent_to(port) >= 2, 20, message="two connects waiting")
            assert stop_time(proc) < PROMPT
            assert "READY=1" not in notify.messages
    finally:
        filler.close()
        listener.close()


def test_ready_comes_once_the_server_answers_on_the_default_tube(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    with cmdstalk_notified(tmp_path, "--address", beanstalk.address) as (proc, notify):
        notify.wait_for("READY=1", proc)
        assert stop_time(proc) < PROMPT
