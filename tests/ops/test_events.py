"""Event log v2: exact record layout, concurrent appends, rotation and reopen."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmdstalk_py.ops.eventlog import EventLog, bounded_tail, event_record, install_sighup_reopen
from cmdstalk_py.supervisor.results import JobResult, Outcome

SCHEMA_KEYS = [
    "schema", "start", "end", "duration_ms", "hostname", "pid", "pool", "server", "tube",
    "slot", "job_id",
    "priority", "ttr", "releases", "timeouts", "reserves", "age_s", "payload_bytes", "outcome",
    "exit_code", "signal", "release_delay", "stdout_tail", "stderr_tail", "error",
    "reason", "killed", "progress", "peak_memory_bytes", "cpu_s", "procs",
]  # fmt: skip
ISO_MS_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def result(job_id: int = 7, **kw: object) -> JobResult:
    fields: dict[str, object] = dict(
        job_id=job_id, tube="mail", slot=1, outcome=Outcome.DELETED,
        started_at=1795262950.25, ended_at=1795262951.7505, priority=1024, ttr=60,
        releases=0, timeouts=0, reserves=1, age_s=3, payload_bytes=11, exit_code=0,
        stdout_tail="HELLO\n", server="10.0.0.5:11300", pool="mail",
    )  # fmt: skip
    fields.update(kw)
    return JobResult(**fields)  # type: ignore[arg-type]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_record_layout_types_and_values() -> None:
    rec = event_record(result(), "host-a", 4242)
    assert list(rec) == SCHEMA_KEYS
    assert rec == {
        "schema": 4, "start": "2026-11-21T12:09:10.250Z", "end": "2026-11-21T12:09:11.750Z",
        "duration_ms": 1500.5, "hostname": "host-a", "pid": 4242, "pool": "mail",
        "server": "10.0.0.5:11300", "tube": "mail", "slot": 1,
        "job_id": 7, "priority": 1024, "ttr": 60, "releases": 0, "timeouts": 0, "reserves": 1,
        "age_s": 3, "payload_bytes": 11, "outcome": "deleted", "exit_code": 0, "signal": None,
        "release_delay": None, "stdout_tail": "HELLO\n", "stderr_tail": "", "error": None,
        "reason": None, "killed": None, "progress": None, "peak_memory_bytes": None,
        "cpu_s": None, "procs": None,
    }  # fmt: skip
    assert isinstance(rec["duration_ms"], float)
    for key in ("pid", "slot", "job_id", "priority", "ttr", "releases", "timeouts",
                "reserves", "age_s", "payload_bytes"):  # fmt: skip
        assert type(rec[key]) is int, key


def test_record_signal_release_and_error_fields() -> None:
    killed = event_record(
        result(outcome=Outcome.TIMEOUT_BURIED, exit_code=None, signal=signal.SIGKILL), "h", 1
    )
    assert killed["signal"] == "SIGKILL" and killed["exit_code"] is None
    assert killed["outcome"] == "timeout_buried"
    released = event_record(result(outcome=Outcome.RELEASED, exit_code=1, release_delay=16), "h", 1)
    assert (released["outcome"], released["release_delay"]) == ("released", 16)
    lost = event_record(result(outcome=Outcome.LOST, exit_code=None, error="NOT_FOUND"), "h", 1)
    assert (lost["outcome"], lost["error"]) == ("lost", "NOT_FOUND")
    for outcome in Outcome:
        rec = event_record(result(outcome=outcome), "h", 1)
        assert ISO_MS_Z.fullmatch(str(rec["start"])) and ISO_MS_Z.fullmatch(str(rec["end"]))


def test_tails_are_bounded_to_4_kib_of_utf8() -> None:
    big = "x" * 10_000 + "é" * 3000 + "END"
    rec = event_record(result(stdout_tail=big, stderr_tail="\udcff bad surrogate"), "h", 1)
    tail = str(rec["stdout_tail"])
    # 4096 bytes = "END" + 2046 two-byte "é" + one orphan byte, which is dropped.
    assert tail == "é" * 2046 + "END"
    assert rec["stderr_tail"] == "? bad surrogate"
    # A cut inside a two-byte character drops the orphan byte instead of inventing U+FFFD.
    assert bounded_tail("é" * 3, limit=5) == "éé"


def test_many_threads_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    elog = EventLog(str(path), hostname="h", pid=1)
    threads_n, per_thread = 8, 500

    def worker(t: int) -> None:
        for i in range(per_thread):
            # Lines of very different sizes (up to ~4 KiB) make torn writes visible.
            elog.job_finished(result(job_id=t * per_thread + i, slot=t, stdout_tail="z" * (i * 8)))
            elog.flush()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elog.close()
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    records = [json.loads(line) for line in raw.decode().split("\n")[:-1]]
    assert len(records) == threads_n * per_thread
    assert sorted(int(r["job_id"]) for r in records) == list(range(threads_n * per_thread))
    assert all(list(r) == SCHEMA_KEYS for r in records)


def test_rename_rotation_is_noticed_within_the_check_interval(tmp_path: Path) -> None:
    path, rotated = tmp_path / "events.jsonl", tmp_path / "events.jsonl.1"
    clock = FakeClock()
    elog = EventLog(str(path), clock=clock)
    elog.job_finished(result(1))
    elog.flush()
    path.rename(rotated)
    elog.job_finished(result(2))  # within the interval: still the old (renamed) file
    elog.flush()
    clock.now += 1.0
    elog.job_finished(result(3))
    elog.flush()
    elog.job_finished(result(4))
    elog.flush()
    elog.close()
    assert [r["job_id"] for r in read_lines(rotated)] == [1, 2]
    assert [r["job_id"] for r in read_lines(path)] == [3, 4]


def test_deleted_file_is_recreated(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    clock = FakeClock()
    elog = EventLog(str(path), clock=clock)
    elog.job_finished(result(1))
    elog.flush()
    path.unlink()
    clock.now += 5
    elog.job_finished(result(2))
    elog.flush()
    elog.close()
    assert [r["job_id"] for r in read_lines(path)] == [2]


def test_copytruncate_keeps_appending_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    elog = EventLog(str(path))
    elog.job_finished(result(1))
    elog.flush()
    os.truncate(path, 0)  # logrotate's copytruncate
    elog.job_finished(result(2))
    elog.flush()
    elog.close()
    assert path.read_bytes().startswith(b"{")  # O_APPEND: no hole of NULs before the line
    assert [r["job_id"] for r in read_lines(path)] == [2]


@pytest.fixture
def restore_sighup() -> Iterator[None]:
    old = signal.getsignal(signal.SIGHUP)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, old)


def test_sighup_reopens_at_next_write(tmp_path: Path, restore_sighup: None) -> None:
    path, rotated = tmp_path / "events.jsonl", tmp_path / "events.jsonl.1"
    clock = FakeClock()  # frozen: only the signal can trigger the reopen
    elog = EventLog(str(path), clock=clock)
    install_sighup_reopen(elog)
    elog.job_finished(result(1))
    elog.flush()
    path.rename(rotated)
    elog.job_finished(result(2))
    elog.flush()
    os.kill(os.getpid(), signal.SIGHUP)  # the handler runs in this (the main) thread
    elog.job_finished(result(3))
    elog.flush()
    elog.close()
    assert [r["job_id"] for r in read_lines(rotated)] == [1, 2]
    assert [r["job_id"] for r in read_lines(path)] == [3]


def test_explicit_reopen(tmp_path: Path) -> None:
    path, rotated = tmp_path / "e.jsonl", tmp_path / "e.jsonl.1"
    elog = EventLog(str(path), clock=FakeClock())
    elog.job_finished(result(1))
    elog.flush()
    path.rename(rotated)
    elog.reopen()
    elog.job_finished(result(2))
    elog.flush()
    elog.close()
    assert [r["job_id"] for r in read_lines(path)] == [2]


def test_write_failure_is_logged_once_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    path = logdir / "events.jsonl"
    clock = FakeClock()
    elog = EventLog(str(path), clock=clock)
    path.unlink()
    logdir.rmdir()
    clock.now += 2
    with caplog.at_level(logging.ERROR, logger="cmdstalk.events"):
        elog.job_finished(result(1))  # must not raise: a lost event line never loses a job
        elog.job_finished(result(2))
        elog.flush()
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1
    logdir.mkdir()
    elog.job_finished(result(3))  # after a failure every write checks the path again
    elog.close()
    assert [r["job_id"] for r in read_lines(path)] == [3]


def test_stdout_destination(capfd: pytest.CaptureFixture[str]) -> None:
    elog = EventLog("-", hostname="h", pid=9)
    print("before", flush=True)
    elog.job_finished(result(5))
    elog.flush()
    elog.close()
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "before"
    assert json.loads(out[1])["job_id"] == 5


def test_closed_log_drops_records_quietly(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    elog = EventLog(str(path))
    elog.close()
    elog.job_finished(result(1))
    elog.flush()
    assert path.read_text() == ""


def test_reopen_failure_does_not_raise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    path = logdir / "events.jsonl"
    elog = EventLog(str(path), clock=FakeClock())
    path.unlink()
    logdir.rmdir()
    with caplog.at_level(logging.ERROR, logger="cmdstalk.events"):
        elog.reopen()  # the supervisor calls this on SIGHUP: it must not take it down
    assert any("cannot reopen" in r.getMessage() for r in caplog.records)
    logdir.mkdir()
    elog.job_finished(result(1))  # the failed reopen is retried at the next write
    elog.close()
    assert [r["job_id"] for r in read_lines(path)] == [1]
