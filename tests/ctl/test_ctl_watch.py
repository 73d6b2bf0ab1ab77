"""``top`` (frames and rates), ``show --events`` and ``tail`` (the event log, followed)."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import threading
from pathlib import Path
from typing import IO

from tests.ctl.run import CTL, ctl, out
from tests.helpers import BeanstalkServer, free_port, wait_until

CLEAR = b"\x1b[H\x1b[2J"


def _record(job_id: int, tube: str, outcome: str, stderr: str = "", **more: object) -> bytes:
    record = {"schema": 1, "end": "2026-11-21T12:27:21.995Z", "duration_ms": 4.6, "tube": tube,
              "slot": 0, "job_id": job_id, "outcome": outcome, "exit_code": 3,
              "stderr_tail": stderr, **more}  # fmt: skip
    return json.dumps(record).encode() + b"\n"


def test_top_shows_frames_and_rates(beanstalk: BeanstalkServer) -> None:
    c = beanstalk.client(use="mail")
    c.put(b"x")
    stop = threading.Event()

    def produce() -> None:
        p = beanstalk.client(use="mail")
        while not stop.wait(0.01):
            p.put(b"y")

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        result = ctl(beanstalk.address, "top", "--iterations", "2", "--interval", "0.5")
    finally:
        stop.set()
        thread.join()
    frames = out(result).split("\n\n")
    assert result.returncode == 0 and len(frames) == 2
    first = next(line for line in frames[0].splitlines() if line.startswith("mail"))
    second = next(line for line in frames[1].splitlines() if line.startswith("mail"))
    assert first.split()[-2:] == ["-", "-"]  # one sample: no rate yet
    assert float(second.split()[-2]) > 0  # puts per second
    assert all(len(line) <= 80 for line in out(result).splitlines())
    frame = json.loads(out(ctl(beanstalk.address, "top", "--once", "--json")))
    assert {t["name"] for t in frame["tubes"]} >= {"default", "mail"}


def test_show_with_events_tells_the_last_outcome(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    c = beanstalk.client(use="mail", watch="mail")
    job_id = c.put(b"work")
    events = tmp_path / "events.jsonl"
    events.write_bytes(
        _record(job_id, "mail", "released", "first try\n")
        + _record(job_id, "other", "deleted")  # same id, another tube: another server's job
        + b'{"torn line\n'
        + _record(job_id, "mail", "released", "boom \x1b[31m\nno such user\n")
    )
    shown = out(ctl(beanstalk.address, "show", str(job_id), "--events", str(events)))
    assert "last outcome" in shown and "released (exit 3" in shown
    assert "no such user" in shown and "\\x1b[31m" in shown and "first try" not in shown
    c.delete(job_id)  # gone from the server: the event log still answers
    gone = ctl(beanstalk.address, "show", str(job_id), "--events", str(events), "--json")
    assert gone.returncode == 0 and json.loads(out(gone))["event"]["outcome"] == "released"
    assert ctl(beanstalk.address, "show", "424242", "--events", str(events)).returncode == 1


def _read_line(stream: IO[bytes], lines: list[bytes]) -> None:
    for line in stream:
        lines.append(line)


def test_tail_follows_filters_and_survives_rotation(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(_record(1, "mail", "deleted") + _record(2, "mail", "buried", "bad\n"))
    proc = subprocess.Popen([CTL, "tail", str(events), "--failed"], stdout=subprocess.PIPE)
    lines: list[bytes] = []
    reader = threading.Thread(target=_read_line, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(lines) == 1, timeout=30, message="the backlog")
        assert b"mail:0 job 2 buried (exit 3, 5 ms) | bad" in lines[0]
        with open(events, "ab") as f:
            f.write(_record(3, "mail", "deleted") + _record(4, "mail", "lost", error="gone"))
        wait_until(lambda: len(lines) == 2, timeout=30, message="a followed record")
        assert b"job 4 lost" in lines[1]
        os.rename(events, tmp_path / "events.jsonl.1")  # logrotate
        events.write_bytes(_record(5, "web", "timeout_buried", "\x1b]0;x\x07slow\n"))
        wait_until(lambda: len(lines) == 3, timeout=30, message="the record after rotation")
        assert b"job 5 timeout_buried" in lines[2] and b"\\x1b]0;x\\x07slow" in lines[2]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    filtered = ctl(None, "tail", str(tmp_path / "events.jsonl.1"), "--no-follow", "--tube",
                   "mail", "--outcome", "deleted", "--json")  # fmt: skip
    assert [json.loads(line)["job_id"] for line in out(filtered).splitlines()] == [1, 3]
    assert ctl(None, "tail", str(tmp_path / "nothing"), "--no-follow").returncode == 1


def test_workers_from_a_dashboard_that_does_not_answer() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    result = ctl(None, "workers", "--from", down)
    assert result.returncode == 3 and down.encode() in result.stderr
    assert out(result).startswith("POOL")  # the (empty) table of those that answered


def test_top_refreshes_in_place_on_a_terminal(beanstalk: BeanstalkServer) -> None:
    long_name = "t" * 200  # the longest tube name: the table still fits 80 columns
    beanstalk.client(use=long_name).put(b"x")
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [CTL, "--address", beanstalk.address, "top", "--iterations", "2", "--interval",
             "0.2"], stdout=follower, stderr=subprocess.PIPE, env={**os.environ,
             "COLUMNS": "80", "LINES": "24"},
        )  # fmt: skip
        os.close(follower)
        follower = -1
        screen = b""
        with contextlib.suppress(OSError):  # EIO once the command exits and closes its end
            while chunk := os.read(leader, 65536):
                screen += chunk
        assert proc.wait(timeout=30) == 0
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    frames = screen.split(CLEAR)
    assert len(frames) == 3 and frames[0] == b""  # each frame starts on a cleared screen
    lines = frames[2].decode().replace("\r\n", "\n").splitlines()
    assert all(len(line) <= 80 for line in lines) and any(line.startswith("ttt") for line in lines)
