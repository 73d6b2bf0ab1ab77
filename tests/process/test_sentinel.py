"""The sentinel: its protocol, and a sentinel that stops reading never stalls a broker.

The end-to-end drill (kill -9 of a real cmdstalk) is in tests/supervisor/test_kill_supervisor.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cmdstalk_py.process import sentinel
from cmdstalk_py.process.sentinel import _read_runs, start_sentinel, tell_sentinel
from tests.helpers import wait_until


def test_protocol_keeps_the_runs_going_on_across_split_chunks() -> None:
    stream = b"+1-1\n=1-1 100\n+1-2\n=1-2 200\n-1-1\n+1-3\n=1-3 3"
    chunks = [stream[i : i + 5] for i in range(0, len(stream), 5)] + [b"00\n"]
    assert _read_runs(chunks) == {"1-2": 200, "1-3": 300}


def test_run_told_before_its_pid_is_still_a_run() -> None:
    # Killed between "+" and "=": the marker alone finds its processes.
    assert _read_runs([b"+7-1\n"]) == {"7-1": None}


@pytest.fixture
def own_sentinel() -> Iterator[psutil.Process]:
    """A sentinel for this test process, removed afterwards so no other test talks to it."""
    pid = start_sentinel(0.5)
    assert pid is not None
    fd = sentinel._fd
    try:
        yield psutil.Process(pid)
    finally:
        sentinel._fd = -1
        os.kill(pid, signal.SIGCONT)
        os.close(fd)  # end of file: the sentinel exits
        os.waitpid(pid, 0)


def test_a_stopped_sentinel_never_blocks_the_supervisor(own_sentinel: psutil.Process) -> None:
    os.kill(own_sentinel.pid, signal.SIGSTOP)
    done = threading.Event()

    def flood() -> None:
        for i in range(200_000):  # far more than the pipe holds
            tell_sentinel(f"-0-{i}")
        done.set()

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    assert done.wait(30), "tell_sentinel blocked on a full pipe"


def test_sentinel_kills_runs_going_on_at_end_of_file(tmp_path: Path) -> None:
    # A stand-in supervisor: it tells its sentinel about one run (a process group with a
    # TERM-proof member) and dies without a word; the sentinel must kill the whole group.
    pid_file = tmp_path / "pid"
    script = f"""
import os, subprocess, sys, time
from cmdstalk_py.process.sentinel import start_sentinel, tell_sentinel
start_sentinel(0.3)
cmd = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 1000 & echo $! > {pid_file}; wait"],
                       start_new_session=True)
tell_sentinel("+1-1")
tell_sentinel(f"=1-1 {{cmd.pid}}")
while not os.path.exists("{pid_file}") or not open("{pid_file}").read().strip():
    time.sleep(0.01)
os.kill(os.getpid(), 9)
"""
    proc = subprocess.run([sys.executable, "-c", script], timeout=30, capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    grandchild = int(pid_file.read_text())

    def dead() -> bool:
        try:
            return psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    try:
        wait_until(dead, 10, message="the run's process killed")
    finally:
        if not dead():
            os.kill(grandchild, signal.SIGKILL)
