"""One server per binlog directory, across threads of one process and across processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogLockedError, BinlogOptions

NEVER = BinlogOptions(fsync_ms=None)

HOLDER = """
import sys
from cmdstalk_py.server.binlog import Binlog, BinlogOptions
log = Binlog(sys.argv[1], BinlogOptions(fsync_ms=None))
print("ready", flush=True)
sys.stdin.read()  # hold the lock until the parent closes our stdin (or kills us)
log.close()
"""

OPENER = """
import sys
from cmdstalk_py.server.binlog import Binlog, BinlogLockedError, BinlogOptions
try:
    Binlog(sys.argv[1], BinlogOptions(fsync_ms=None)).close()
except BinlogLockedError as exc:
    print(exc, flush=True)
    sys.exit(3)
print("opened", flush=True)
"""


def python(code: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", code, *args], text=True, cwd=Path(__file__).parents[2], **kw
    )


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with Binlog(str(tmp_path), NEVER):
        with pytest.raises(BinlogLockedError) as refused:
            Binlog(str(tmp_path), NEVER)
        assert refused.value.pid == os.getpid()
        assert str(tmp_path) in str(refused.value) and str(os.getpid()) in str(refused.value)
    Binlog(str(tmp_path), NEVER).close()  # free again after close


def test_another_process_holding_the_lock_is_named(tmp_path: Path) -> None:
    holder = python(HOLDER, str(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(BinlogLockedError) as refused:
            Binlog(str(tmp_path), NEVER)
        assert refused.value.pid == holder.pid
        assert f"locked by process {holder.pid}" in str(refused.value)
        # A crashed holder leaves no stale lock: the kernel drops it with the process.
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        with Binlog(str(tmp_path), NEVER):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_second_process_fails_while_we_hold_the_lock(tmp_path: Path) -> None:
    with Binlog(str(tmp_path), NEVER):
        opener = python(OPENER, str(tmp_path), stdout=subprocess.PIPE)
        out, _ = opener.communicate(timeout=60)
        assert opener.returncode == 3
        assert f"binlog directory {tmp_path} is locked by process {os.getpid()}" in out
    opener = python(OPENER, str(tmp_path), stdout=subprocess.PIPE)
    out, _ = opener.communicate(timeout=60)
    assert (opener.returncode, out.strip()) == (0, "opened")


def test_lock_file_records_the_holder_pid(tmp_path: Path) -> None:
    with Binlog(str(tmp_path), NEVER):
        assert (tmp_path / "lock").read_text().strip() == str(os.getpid())
