"""The event log's tube records: a pool's tube held back by its limit or rate, and servable
again; their layout, the settling of flips, and the real ``cmdstalk`` writing them."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest

from cmdstalk_py.ops.eventlog import EventLog, tube_record
from cmdstalk_py.ops.holdsettle import HoldSettler
from cmdstalk_py.ops.observers import TubeHold
from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.ops.test_events import FakeClock, read_lines, result
from tests.supervisor.conftest import start_cmdstalk
from tests.supervisor.test_sinks import Drainer, unread_fifo

TUBE_KEYS = ["schema", "event", "time", "hostname", "pid", "pool", "tube", "reason", "running",
             "limit", "rate", "burst"]  # fmt: skip
# Tube records of about 200 bytes: several times what a pipe holds unread.
STALL_RECORDS = 2000


def held(reason: str | None, running: int = 1, tube: str = "thumbs") -> TubeHold:
    return TubeHold("img", tube, reason, running, 1, None, None)


def test_tube_record_layout() -> None:
    rec = tube_record(TubeHold("img", "thumbs", "rate", 3, 4, 2.5, 5.0), "h", 9, 1795262950.25)
    assert list(rec) == TUBE_KEYS
    assert rec == {
        "schema": 3, "event": "tube_held", "time": "2026-11-21T12:09:10.250Z", "hostname": "h",
        "pid": 9, "pool": "img", "tube": "thumbs", "reason": "rate", "running": 3, "limit": 4,
        "rate": 2.5, "burst": 5.0,
    }  # fmt: skip
    servable = tube_record(TubeHold("img", "t", None, 0, 2, None, None), "h", 9, 0.0)
    assert (servable["event"], servable["reason"]) == ("tube_servable", None)


def test_a_flip_back_to_held_within_the_settle_time_writes_nothing() -> None:
    s = HoldSettler(settle=1.0)
    assert [c.hold.reason for c in s.change(held("limit"), 10.0, 100.0)] == ["limit"]
    # A job ends (a free slot), the next starts a moment later: still held, nothing new.
    assert s.change(held(None, 0), 10.5, 100.5) == []
    out, left = s.due(100.9)
    assert out == [] and left == pytest.approx(0.6)
    assert s.change(held("limit"), 10.6, 100.6) == []
    assert s.due(200.0) == ([], math.inf)
    # Servable for good: written once settled, with the time of the change.
    assert s.change(held(None, 0), 11.0, 101.0) == []
    assert s.due(101.5)[0] == []
    (change,), left = s.due(102.0)
    assert (change.hold.reason, change.at, left) == (None, 11.0, math.inf)
    # Another reason is news even inside the settle time; so is a servable never held.
    s.change(held("limit"), 12.0, 103.0)
    s.change(held(None, 0), 12.1, 103.1)
    assert [c.hold.reason for c in s.change(held("rate"), 12.2, 103.2)] == ["rate"]
    assert s.change(held(None, 0, tube="other"), 12.3, 103.3) == []
    s.change(held(None, 0), 12.4, 103.4)
    assert [c.hold.reason for c in s.flush()] == [None]  # closing: the last change stands


def test_the_event_log_writes_held_at_once_and_servable_once_settled(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    clock = FakeClock()
    elog = EventLog(str(path), hostname="h", pid=1, clock=clock, settle=1.0)
    try:
        elog.job_finished(result(1))
        elog.tube_held(held("limit"))
        wait_until(lambda: len(read_lines(path)) == 2, 10, message="the held record")
        elog.tube_held(held(None, 0))
        elog.tube_held(held("limit"))  # the flip of a busy tube
        elog.tube_held(held(None, 0))
        elog.heartbeat()
        elog.job_finished(result(2))
        elog.flush()  # the file is current
        assert [r.get("event") for r in read_lines(path)] == [None, "tube_held", None]
        clock.now += 1.0
        elog.heartbeat()
        wait_until(lambda: len(read_lines(path)) == 4, 10, message="the servable record")
        elog.tube_held(held("rate"))
        elog.tube_held(held(None, 0))
    finally:
        elog.close()
    records = read_lines(path)
    assert [(r.get("event"), r.get("reason")) for r in records] == [
        (None, None), ("tube_held", "limit"), (None, None), ("tube_servable", None),
        ("tube_held", "rate"), ("tube_servable", None),
    ]  # fmt: skip
    assert [list(r) for r in records if "event" in r] == [TUBE_KEYS] * 4
    assert [r["schema"] for r in records] == [4, 3, 4, 3, 3, 3]


def test_a_stalled_sink_never_holds_up_the_broker_that_changed_a_tube(tmp_path: Path) -> None:
    path = tmp_path / "events.fifo"
    with unread_fifo(path) as fifo:
        # Records go through the queue: a stalled sink holds nobody up, and loses nothing
        # that fits the queue.
        elog = EventLog(str(path), hostname="h", pid=1)
        drainer = Drainer(fifo)
        try:
            slowest = 0.0
            for i in range(STALL_RECORDS):  # far more than the unread pipe takes
                began = time.monotonic()
                elog.tube_held(held("limit", tube=f"t{i}"))
                slowest = max(slowest, time.monotonic() - began)
            assert slowest < 1.0
            os.set_blocking(fifo, True)
            drainer.start()
        finally:
            elog.close()
        drainer.join(10)
    lines = drainer.text().splitlines()
    assert len(lines) == STALL_RECORDS and elog.lost_total == 0
    assert [json.loads(line)["tube"] for line in lines] == [f"t{i}" for i in range(STALL_RECORDS)]


def run_pool(beanstalk: BeanstalkServer, tmp_path: Path, jobs: int, *args: str) -> Path:
    """``cmdstalk`` with ``args`` on tube t until ``jobs`` job records and, when the pool
    holds the tube back, the servable record after them; the event log's path."""
    events = tmp_path / "events.jsonl"
    producer = beanstalk.client(use="t")
    with open(tmp_path / "stderr", "wb") as err:
        proc = start_cmdstalk(
            "--address", beanstalk.address, "--tubes", "t", "--workers", "2", "--events",
            str(events), "--cmd", "sleep 0.2", *args, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            for i in range(jobs):
                producer.put(f"job {i}".encode(), ttr=30)

            def done() -> bool:
                records = events_of(events)
                finished = sum("event" not in r for r in records)
                limited = bool(args)
                last_servable = bool(records) and records[-1].get("event") == "tube_servable"
                return finished == jobs and (not limited or last_servable)

            wait_until(done, 60, message=f"{jobs} jobs and the tube servable again")
        finally:
            stop_process(proc)
    return events


def events_of(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def tube_records(path: Path) -> list[dict[str, object]]:
    return [r for r in events_of(path) if "event" in r]


def test_a_tube_limit_writes_held_then_servable(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    events = run_pool(beanstalk, tmp_path, 4, "--tube-limit", "t=1")
    records = tube_records(events)
    # One burst, one hold: the flips between its jobs settle away.
    assert [(r["event"], r["reason"], r["running"], r["limit"], r["rate"]) for r in records] == [
        ("tube_held", "limit", 1, 1, None), ("tube_servable", None, 0, 1, None),
    ]  # fmt: skip
    assert [(r["pool"], r["tube"], r["schema"]) for r in records] == [("default", "t", 3)] * 2
    jobs = [r for r in events_of(events) if "event" not in r]
    assert len(jobs) == 4 and all(r["schema"] == 4 and r["outcome"] == "deleted" for r in jobs)
    assert str(records[0]["time"]) <= str(jobs[0]["end"]) <= str(records[1]["time"])


def test_a_tube_rate_writes_held_then_servable(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    events = run_pool(beanstalk, tmp_path, 3, "--tube-rate", "t=4/s:1")
    records = tube_records(events)
    assert [(r["event"], r["reason"], r["limit"], r["rate"], r["burst"]) for r in records] == [
        ("tube_held", "rate", None, 4.0, 1.0), ("tube_servable", None, None, 4.0, 1.0),
    ]  # fmt: skip


def test_no_limit_no_tube_records(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    events = run_pool(beanstalk, tmp_path, 3)
    assert tube_records(events) == []
