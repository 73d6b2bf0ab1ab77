"""BinlogJournal with the real queue engine (no sockets): a restart preserves every job.

Ready, delayed (remaining delay counted from the original put, across a restart with a
different monotonic clock and some downtime), buried, priorities, TTRs, binary bodies,
counters, reserved -> ready, deleted jobs stay deleted, ids do not repeat.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

from cmdstalk_py.server import commands
from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.binlog import Binlog, BinlogOptions
from cmdstalk_py.server.binlog.adapter import BinlogJournal
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.job import DELAYED
from cmdstalk_py.server.session import Session
from tests.server.binlog.faults import FaultyOps

WALL0 = 1_700_000_000.0
SYNC_EACH = BinlogOptions(fsync_ms=0)


class Clock:
    """A process's monotonic clock and the wall clock, both set by hand."""

    def __init__(self, mono: float, wall: float) -> None:
        self.mono = mono
        self.wall_at_mono = wall - mono

    def now(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.wall_at_mono + self.mono


def run(engine: Engine, s: Session, line: bytes, now: float, body: bytes | None = None) -> bytes:
    cmd = p.parse_command(line)
    if isinstance(cmd, p.Put):
        assert body is not None
        return commands.put_body(engine, s, cmd, body + b"\r\n", now)
    reply = commands.execute(engine, s, cmd, now)
    assert reply is not None
    return reply


def job_stats(engine: Engine, s: Session, job_id: int, now: float) -> dict[str, str]:
    reply = run(engine, s, b"stats-job %d" % job_id, now)
    if reply == p.NOT_FOUND:
        return {}
    return dict(re.findall(r"^([\w-]+): (.*)$", reply.decode(), re.M))


def start(path: Path, clock: Clock, ops: FaultyOps | None = None) -> tuple[Engine, BinlogJournal]:
    journal = BinlogJournal(Binlog(str(path), SYNC_EACH, ops=ops), clock.now, clock.wall)
    engine = Engine(clock.now(), journal=journal)
    journal.restore(engine, clock.now())
    return engine, journal


def test_restart_preserves_every_job_and_counter(tmp_path: Path) -> None:
    first = Clock(mono=1000.0, wall=WALL0)
    ops = FaultyOps(str(tmp_path))
    engine, journal = start(tmp_path, first, ops)
    s = engine.connect()
    t = first.now
    assert run(engine, s, b"put 5 0 60 5", t(), b"alpha") == b"INSERTED 1\r\n"  # 1 ready
    assert run(engine, s, b"put 9 100 30 4", t(), b"beta") == b"INSERTED 2\r\n"  # 2 delayed
    binary = bytes(range(256)) + b"\r\n\x00"
    assert run(engine, s, b"put 0 0 1 %d" % len(binary), t(), binary).startswith(b"INSERTED 3")
    for jid in (4, 5, 6, 7):
        assert run(engine, s, b"put 100 0 120 1", t(), b"x") == b"INSERTED %d\r\n" % jid
    run(engine, s, b"use other", t())
    assert run(engine, s, b"put 2000 0 10 5", t(), b"other") == b"INSERTED 8\r\n"
    journal.tick(t())
    first.mono += 2.0  # 1002
    # Reserve 1..4 (pri order: 3, 1, 4, 5 ... take 4 of them), act on each.
    got = [run(engine, s, b"reserve-job %d" % jid, t()) for jid in (4, 5, 6, 7)]
    assert all(r.startswith(b"RESERVED") for r in got)
    assert run(engine, s, b"bury 4 7", t()) == p.BURIED  # 4 buried, pri 7
    assert run(engine, s, b"release 5 50 40", t()) == p.RELEASED  # 5 delayed 40s
    assert run(engine, s, b"bury 6 1", t()) == p.BURIED
    assert run(engine, s, b"kick-job 6", t()) == b"KICKED\r\n"  # 6 kicked -> ready
    # 7 stays reserved when the process dies.
    assert run(engine, s, b"delete 8", t()) == p.DELETED
    journal.tick(t())
    first.mono += 1.0  # 1003: the process is killed, nothing closed.
    ops.kill()

    # New process 5 s later, its monotonic clock starting elsewhere.
    second = Clock(mono=50.0, wall=WALL0 + 3.0 + 5.0)
    engine, journal = start(tmp_path, second)
    s = engine.connect()
    now = second.now()
    stats = {jid: job_stats(engine, s, jid, now) for jid in range(1, 9)}
    assert stats[8] == {}, "deleted job came back"
    want = {
        1: ("default", "ready", "5", "0", "60", "0", "0", "0", "0"),
        2: ("default", "delayed", "9", "100", "30", "0", "0", "0", "0"),
        3: ("default", "ready", "0", "0", "1", "0", "0", "0", "0"),
        4: ("default", "buried", "7", "0", "120", "1", "0", "0", "1"),
        5: ("default", "delayed", "50", "40", "120", "1", "0", "1", "0"),
        6: ("default", "ready", "1", "0", "120", "1", "0", "0", "1"),
        7: ("default", "ready", "100", "0", "120", "1", "0", "0", "0"),
    }
    fields = ("tube", "state", "pri", "delay", "ttr", "reserves", "timeouts", "releases",
              "buries")  # fmt: skip
    for jid, expected in want.items():
        assert tuple(stats[jid][f] for f in fields) == expected, (jid, stats[jid])
    assert stats[6]["kicks"] == "1"
    # Ages count from the original put (8 s ago for job 1) and remaining delays likewise:
    # job 2 was put with delay 100 at 1000 -> 92 s left; job 5 released at 1002 with
    # delay 40 -> 34 s left (truncated, so 91/33 are fine too).
    assert stats[1]["age"] == "8"
    assert stats[2]["time-left"] in ("91", "92")
    assert stats[5]["time-left"] in ("33", "34")
    assert run(engine, s, b"peek 3", now) == p.render_found(3, binary + b"\r\n")
    assert run(engine, s, b"put 1 0 1 1", now, b"n") == b"INSERTED 9\r\n"  # ids go on
    # The delayed job becomes ready on time, from the original deadline.
    engine.tick(now + 34.5)
    assert job_stats(engine, s, 5, now + 34.5)["state"] == "ready"
    journal.close()


def test_disk_full_put_is_out_of_memory_and_nothing_is_lost(tmp_path: Path) -> None:
    clock = Clock(mono=10.0, wall=WALL0)
    ops = FaultyOps(str(tmp_path))
    engine, journal = start(tmp_path, clock, ops)
    s = engine.connect()
    assert run(engine, s, b"put 1 0 5 2", clock.now(), b"ok") == b"INSERTED 1\r\n"
    assert journal.tick(clock.now())
    ops.inject("pwrite", errno.ENOSPC, times=2)
    assert run(engine, s, b"put 1 0 5 2", clock.now(), b"no") == p.OUT_OF_MEMORY
    assert run(engine, s, b"delete 1", clock.now()) == p.INTERNAL_ERROR
    ops.clear()  # space is back
    assert run(engine, s, b"delete 1", clock.now()) == p.DELETED
    assert run(engine, s, b"put 1 0 5 3", clock.now(), b"yes") == b"INSERTED 3\r\n"
    assert journal.tick(clock.now())
    ops.kill()
    engine, journal = start(tmp_path, clock)
    s = engine.connect()
    assert sorted(engine.jobs) == [3]
    assert run(engine, s, b"put 1 0 5 1", clock.now(), b"z") == b"INSERTED 4\r\n"
    assert journal.stats()[4] == SYNC_EACH.segment_size
    assert journal.file_of(engine.jobs[4]) == journal.stats()[1]
    journal.close()


def test_updates_persist_what_record_says(tmp_path: Path) -> None:
    clock = Clock(mono=10.0, wall=WALL0)
    engine, journal = start(tmp_path, clock)
    s = engine.connect()
    run(engine, s, b"put 3 0 9 1", clock.now(), b"a")
    run(engine, s, b"reserve-job 1", clock.now())
    run(engine, s, b"release 1 7 30", clock.now())  # delayed: the deadline is in the record
    run(engine, s, b"kick-job 1", clock.now())
    run(engine, s, b"reserve-job 1", clock.now())
    run(engine, s, b"bury 1 2", clock.now())
    job = engine.jobs[1]
    assert journal.binlog.stats().records_written == 6
    # The delayed state's deadline is converted to wall-clock time like record() does.
    job.state, job.deadline = DELAYED, clock.now() + 30
    journal.job_changed(job)
    expected = journal.record(job)
    journal.close()
    with Binlog(str(tmp_path), SYNC_EACH) as binlog:
        assert binlog.recovery.jobs == {1: expected}


def test_jobs_logged_out_of_id_order_come_back(tmp_path: Path) -> None:
    # A put takes its id at its line, so a later line's job may reach the log first.
    first = Clock(mono=1000.0, wall=WALL0)
    engine, journal = start(tmp_path, first)
    early, late = engine.connect(), engine.connect()
    line = p.parse_command(b"put 0 0 60 1")
    assert isinstance(line, p.Put)
    assert commands.execute(engine, early, line, first.now()) is None  # the body is late
    first.mono += 5.0
    assert run(engine, late, b"put 0 0 60 1", first.now(), b"B") == b"INSERTED 2\r\n"
    assert commands.put_body(engine, early, line, b"A\r\n", first.now(), True) == (
        b"INSERTED 1\r\n")
    journal.tick(first.now())
    journal.close()
    second = Clock(mono=50.0, wall=WALL0 + 10.0)
    engine, journal = start(tmp_path, second)
    s = engine.connect()
    assert [job_stats(engine, s, i, second.now())["age"] for i in (1, 2)] == ["10", "5"]
    assert run(engine, s, b"reserve-with-timeout 0", second.now()) == b"RESERVED 1 1\r\nA\r\n"
    assert run(engine, s, b"put 0 0 60 1", second.now(), b"C") == b"INSERTED 3\r\n"
    journal.close()
