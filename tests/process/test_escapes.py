"""TTR and shutdown kills reach processes that left the command's group and tree.

Each command starts a process that escapes ``killpg`` (``setsid``, job control) and the
command's process tree (a double fork: its parent exits, so it is adopted by this test
process, a child subreaper like the supervisor), writes its pid to a file and waits. After
the kill, that process must be gone (and reaped: no zombie left).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from cmdstalk_py.loop.futures import ensure_future
from cmdstalk_py.loop.tools import run as run_loop
from cmdstalk_py.loop.tools import timeout
from cmdstalk_py.process import (
    KillReason,
    ProcessResult,
    Switch,
    run_command,
)
from cmdstalk_py.process.marker import MARKER, environ_token
from tests.helpers import wait_until
from tests.process.aio import run, until

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}

# Each escapes in its own way; ``{pids}`` is the file to append the escaped pid to.
ESCAPES = {
    "double fork + setsid": "(setsid sleep 1000 & echo $! >> {pids})",
    "job control": "set -m; (sleep 1000 & echo $! >> {pids}); set +m",
    "setsid, ignoring TERM": (
        "(setsid sh -c 'trap \"\" TERM; echo $$ >> {pids}; exec sleep 1000' &)"
    ),
}


pytestmark = pytest.mark.usefixtures("subreaper")


def _gone(pid: int) -> bool:
    """No such process any more (a zombie left for us to reap does not count as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_DEAD
    except psutil.NoSuchProcess:
        return True


def _pids(path: Path, n: int) -> list[int]:
    wait_until(
        lambda: path.exists() and len(path.read_text().split()) >= n, 10, message="pids written"
    )
    return [int(p) for p in path.read_text().split()]


def _assert_all_gone(pids: list[int]) -> None:
    try:
        wait_until(lambda: all(_gone(p) for p in pids), 10, message="escaped processes gone")
    finally:
        for pid in pids:  # never leave a stray sleep behind a failing test
            if not _gone(pid):
                os.kill(pid, 9)
                psutil.Process(pid).wait(5)


def _script(escape: str, pids: Path) -> list[str]:
    # The command itself waits until the escaped process is out of its tree (its parent,
    # a subshell, has exited), so the kill must find it some other way.
    return ["/bin/bash", "-c", f"{escape.format(pids=pids)}; sleep 1000"]


@pytest.mark.parametrize("escape", list(ESCAPES), ids=list(ESCAPES))
def test_ttr_kill_reaches_escaped_processes(escape: str, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result = run(
        _script(ESCAPES[escape], pids),
        b"",
        ENV,
        deadline=time.monotonic() + 1.0,
        grace=0.3,
        marker=True,
    )
    assert result.killed is KillReason.TTR
    _assert_all_gone(_pids(pids, 1))


@pytest.mark.parametrize("escape", list(ESCAPES), ids=list(ESCAPES))
def test_shutdown_kill_reaches_escaped_processes(escape: str, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    stop = Switch()

    async def scenario() -> tuple[ProcessResult, list[int]]:
        argv = _script(ESCAPES[escape], pids)
        task = ensure_future(run_command(argv, b"", ENV, grace=0.3, stop=stop, marker=True))
        try:
            await until(lambda: pids.exists() and pids.read_text().split(), message="pids written")
            escaped = [int(p) for p in pids.read_text().split()]
            await until(
                lambda: psutil.Process(escaped[0]).ppid() == os.getpid(),
                message="the escaped process adopted by us",
            )
        finally:
            stop.set()
        async with timeout(20):
            return await task, escaped

    result, escaped = run_loop(scenario())
    assert result.killed is KillReason.SHUTDOWN
    _assert_all_gone(escaped)


def test_setsid_on_sigterm_is_reached(tmp_path: Path) -> None:
    # The command answers SIGTERM by starting a TERM-proof process in a new session and
    # exiting: that process appears after the first signal went out.
    pids = tmp_path / "pids"
    script = (
        f'trap \'(setsid sh -c "trap \\"\\" TERM; echo \\$\\$ >> {pids}; exec sleep 1000" &);'
        f" while [ ! -s {pids} ]; do sleep 0.01; done; exit 0' TERM; "
        "sleep 1000 & wait"
    )
    result = run(
        ["/bin/bash", "-c", script],
        b"",
        ENV,
        deadline=time.monotonic() + 0.5,
        grace=0.5,
        marker=True,
    )
    assert result.killed is KillReason.TTR
    _assert_all_gone(_pids(pids, 1))


def test_every_command_carries_its_own_marker(tmp_path: Path) -> None:
    out = tmp_path / "marker"
    argv = ["/bin/sh", "-c", f'echo "${MARKER}" >> {out}']
    first = run(argv, b"", ENV, marker=True)
    second = run(argv, b"", ENV, marker=True)
    assert first.exit_code == second.exit_code == 0
    tokens = out.read_text().split()
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert all(t.startswith(f"{os.getpid()}-") for t in tokens)
    assert environ_token(os.getpid()) is None
