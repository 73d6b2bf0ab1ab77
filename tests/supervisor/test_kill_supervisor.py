"""kill -9 of cmdstalk: its sentinel kills the commands that were running (issue #16 item 3).

Without it every command runs on unsupervised to its end, while the server releases its
job at once, so a restarted cmdstalk runs the job a second time, concurrently.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import greenstalk
import psutil
import pytest

from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import start_cmdstalk


def _dead(pid: int) -> bool:
    """Not running. Once cmdstalk is gone its orphans are init's to reap, so a zombie counts
    as dead here: whether init reaps is not cmdstalk's doing."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def _pids(path: Path, n: int) -> list[int]:
    wait_until(
        lambda: path.exists() and len(path.read_text().split()) >= n, 20, message="pids written"
    )
    return [int(p) for p in path.read_text().split()]


def _watching(client: greenstalk.Client[bytes], tube: str) -> bool:
    try:
        return int(client.stats_tube(tube)["current-watching"]) > 0
    except greenstalk.NotFoundError:
        return False  # nobody has watched it yet


def _sentinel_of(proc: subprocess.Popen[bytes]) -> psutil.Process | None:
    for child in psutil.Process(proc.pid).children():
        try:
            if any("cmdstalk_py.process.sentinel" in arg for arg in child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def _cleanup(proc: subprocess.Popen[bytes], pids: list[int]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)
    for pid in pids:  # never leave a stray sleep behind a failing test
        if not _dead(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("target", ["process", "group"])
def test_kill_9_of_cmdstalk_kills_its_running_commands(
    beanstalk: BeanstalkServer, tmp_path: Path, target: str
) -> None:
    # "group": SIGKILL to cmdstalk's whole process group, as supervisord's killasgroup does;
    # the sentinel, in a session of its own, is not in it.
    producer = beanstalk.client(use="k9")
    producer.put(b"", ttr=600)
    pids = tmp_path / "pids"
    # The command itself, a child in its group and a double-forked one in a new session.
    cmd = (
        f"sleep 1000 & echo $! >> {pids}; "
        f"(setsid sleep 1001 & echo $! >> {pids}); "
        f"echo $$ >> {pids}; wait"
    )
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--tubes", "k9", "--cmd", cmd, start_new_session=True
    )
    listed: list[int] = []
    try:
        # No need to wait for the sentinel to be up: it was spawned before the first reserve,
        # and what cmdstalk told it waits in the pipe.
        listed = _pids(pids, 3)
        if target == "group":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_until(lambda: all(_dead(p) for p in listed), 10, message="the commands killed")
        _, err = proc.communicate(timeout=10)  # EOF once the sentinel, holding stderr, exits
        assert b"cmdstalk sentinel: supervisor" in err
    finally:
        _cleanup(proc, listed)


def test_sentinel_exits_with_a_clean_shutdown(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    proc = start_cmdstalk("--address", beanstalk.address, "--tubes", "k9idle", "--cmd", "true")
    try:
        wait_until(lambda: _sentinel_of(proc) is not None, 10, message="the sentinel")
        # The broker watches its tube only once the supervisor's signal handlers are in:
        # a SIGTERM before that would end cmdstalk the default way (status -15).
        client = beanstalk.client()
        wait_until(lambda: _watching(client, "k9idle"), 10, message="the broker")
        sentinel = _sentinel_of(proc)
        assert sentinel is not None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0
        wait_until(lambda: _dead(sentinel.pid), 10, message="the sentinel gone")
        assert b"sentinel" not in err  # nothing was running: nothing to kill or to say
    finally:
        _cleanup(proc, [])
