"""Private by default (issue #16 item 6): the event log is 0600, ``--metrics :PORT`` listens
on loopback, and a job's output cannot forge log lines or send terminal escapes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers import BeanstalkServer, free_port, wait_until
from tests.ops.procs import stop_process
from tests.ops.test_cli_ops import CMDSTALK, base_env, event_lines

# CR (rewrites the line on a terminal), a forged line after LF-less CR, ESC (clear screen),
# NUL, DEL and the one-character CSI U+009B.
HOSTILE = (
    r"printf 'ok\r2026-01-01T00:00:00.000Z INFO [x:0] job 1 forged\033[2J\000\177\302\233end\n'"
)
# Bytes a log line must never carry: every C0 control but tab and the final LF, DEL, and
# C1 controls in their UTF-8 form (C2 80 .. C2 9F).
RAW_CONTROLS = {*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F}


def _unsafe(line: bytes) -> bool:
    return any(b in RAW_CONTROLS for b in line) or any(
        line[i] == 0xC2 and 0x80 <= line[i + 1] <= 0x9F for i in range(len(line) - 1)
    )


def _run_one_job(
    server: BeanstalkServer, tmp_path: Path, *args: str
) -> tuple[subprocess.Popen[bytes], Path]:
    events = tmp_path / "events.jsonl"
    err = tmp_path / "stderr"
    with open(err, "wb") as err_file:
        proc = subprocess.Popen(
            [CMDSTALK, "--address", server.address, "--tubes", "priv", "--cmd", HOSTILE,
             "--events", str(events), *args],
            env=base_env(), stdout=subprocess.DEVNULL, stderr=err_file,
        )  # fmt: skip
    server.client(use="priv").put(b"x", ttr=30)
    wait_until(lambda: len(event_lines(events)) == 1, timeout=30, message="the job's record")
    return proc, err


def test_event_log_is_created_owner_only(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # the usual umask, which left it world-readable
    try:
        proc, _ = _run_one_job(beanstalk, tmp_path)
    finally:
        os.umask(old_umask)
    try:
        mode = stat.S_IMODE((tmp_path / "events.jsonl").stat().st_mode)
        assert mode == 0o600, oct(mode)
    finally:
        stop_process(proc)


def _listening(pid: int, port: int) -> list[str]:
    conns = psutil.Process(pid).net_connections(kind="tcp")
    return [c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def test_metrics_without_a_host_listen_on_loopback(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "priv", "--cmd", "cat",
         "--metrics", f":{port}"],
        env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        addresses = wait_until(lambda: _listening(proc.pid, port), 30, message="metrics listen")
        assert addresses == ["127.0.0.1"]
    finally:
        stop_process(proc)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_job_output_cannot_forge_lines_or_send_escapes(
    real_beanstalkd: BeanstalkServer, tmp_path: Path, fmt: str
) -> None:
    proc, err = _run_one_job(real_beanstalkd, tmp_path, "--log-format", fmt)
    try:
        wait_until(lambda: b"end" in err.read_bytes(), 30, message="the output line logged")
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        stop_process(proc)
    lines = err.read_bytes().split(b"\n")[:-1]
    assert [x for x in lines if _unsafe(x)] == []
    output = [x.decode() for x in lines if b"forged" in x and b"stdout" in x]
    assert len(output) == 1  # one record, one line
    if fmt == "text":
        assert "stdout: ok\\r2026-01-01T00:00:00.000Z INFO [x:0] job 1 forged" in output[0]
        assert output[0].endswith("forged\\x1b[2J\\x00\\x7f\\x9bend")
    else:
        assert json.loads(output[0])["msg"].endswith("forged\x1b[2J\x00\x7f\x9bend")
    # The event log keeps the output as it was, in JSON that no terminal acts on.
    raw = (tmp_path / "events.jsonl").read_bytes()
    assert not _unsafe(raw.rstrip(b"\n"))
    assert str(event_lines(tmp_path / "events.jsonl")[0]["stdout_tail"]).endswith("\x9bend\n")
