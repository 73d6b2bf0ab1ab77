"""Durability drills on real server processes: ``cmdstalk-server -b DIR`` and ``beanstalkd -b``.

Restarts (graceful and kill -9) preserve every job; ids never repeat; a second server on
the same directory fails clearly; disk errors are answered and survived; ``-f 0`` holds
replies until their fsync (the kill -9 under load is in ``test_durable_load``). The
restart scenario also runs against the real beanstalkd 1.12, and the test spells out
where 1.12 differs (see ``BEANSTALKD_DIFFERS``).
"""

from __future__ import annotations

import errno
import fcntl
import re
import socket
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cmdstalk_py.server.embedded import EmbeddedServer
from tests.helpers import free_port, wait_until
from tests.server.binlog.faults import FaultyOps
from tests.server.durable_procs import KINDS, SERVER, Conn, server

# ------------------------------------------------------------------ restart scenario

BINARY = bytes(range(256)) + b"\r\n\x00end\r\n"
# (state, pri, delay, ttr, reserves, releases, buries, kicks) after the restart.
EXPECTED = {
    "ready": ("ready", "5", "0", "60", "0", "0", "0", "0"),
    "delayed": ("delayed", "9", "100", "30", "0", "0", "0", "0"),
    "overdue": ("ready", "4", "1", "10", "0", "0", "0", "0"),
    "buried": ("buried", "7", "0", "120", "1", "0", "1", "0"),
    "reserved": ("ready", "100", "0", "120", "1", "0", "0", "0"),
    "released-delayed": ("delayed", "50", "40", "120", "1", "1", "0", "0"),
    "released": ("ready", "3", "0", "120", "1", "1", "0", "0"),
    "kicked": ("ready", "1", "0", "120", "1", "0", "1", "1"),
}
FIELDS = ("state", "pri", "delay", "ttr", "reserves", "releases", "buries", "kicks")
# What beanstalkd 1.12 brings back differently (docs §9): it does not log reserves or a
# release without delay, and it counts one more bury for a buried job on every restart.
BEANSTALKD_DIFFERS = {
    "buried": {"buries": "2"},
    "reserved": {"reserves": "0"},
    "released": {"pri": "100", "reserves": "0", "releases": "0"},
}


def fill(c: Conn) -> dict[str, int]:
    """Jobs in every state worth keeping; returns name -> id."""
    ids = {}
    assert c.do(b"use t1") == (b"USING t1", None)
    c.do(b"watch t1")
    c.do(b"ignore default")
    ids["ready"] = c.put(BINARY, pri=5, ttr=60)
    ids["delayed"] = c.put(b"de", pri=9, delay=100, ttr=30)
    ids["overdue"] = c.put(b"od", pri=4, delay=1, ttr=10)
    for name in ("buried", "reserved", "released-delayed", "released", "kicked", "deleted"):
        ids[name] = c.put(name.encode(), pri=100, ttr=120)
        line, _ = c.do(b"reserve-job %d" % ids[name])
        assert line.startswith(b"RESERVED"), line
    assert c.do(b"bury %d 7" % ids["buried"])[0] == b"BURIED"
    assert c.do(b"release %d 50 40" % ids["released-delayed"])[0] == b"RELEASED"
    assert c.do(b"release %d 3 0" % ids["released"])[0] == b"RELEASED"
    assert c.do(b"bury %d 1" % ids["kicked"])[0] == b"BURIED"
    assert c.do(b"kick-job %d" % ids["kicked"])[0] == b"KICKED"
    assert c.do(b"delete %d" % ids["deleted"])[0] == b"DELETED"
    return ids


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_and_restart_preserves_every_job(kind: str, tmp_path: Path) -> None:
    with server(kind, tmp_path, "-f", "0") as first:
        c = Conn(first.port)
        put_at = time.monotonic()
        ids = fill(c)
        # "reserved" is still reserved by this connection when the process dies.
        first.crash()
    # Down for longer than the 1 s delay of "overdue" (it must come back ready at once) and
    # long enough that a delay restarted at the restart would show.
    wait_until(lambda: time.monotonic() > put_at + 2.2, timeout=5, message="downtime")
    with server(kind, tmp_path, "-f", "0") as second:
        c = Conn(second.port)
        got = {name: c.yaml(b"stats-job %d" % jid) for name, jid in ids.items()}
        elapsed = time.monotonic() - put_at
        assert got.pop("deleted") == {"reply": "NOT_FOUND"}
        for name, stats in got.items():
            want = dict(zip(FIELDS, EXPECTED[name], strict=True))
            if kind == "beanstalkd":
                want.update(BEANSTALKD_DIFFERS.get(name, {}))
            assert {f: stats[f] for f in FIELDS} == want, (kind, name, stats)
            assert stats["tube"] == "t1"
            # Ages count from the original put.
            assert int(stats["age"]) >= 1, (name, stats)
        # Remaining delays count from the original put / release, not from the restart.
        for name, delay in (("delayed", 100), ("released-delayed", 40)):
            left = int(got[name]["time-left"])
            assert delay - elapsed - 1 <= left <= delay - 2, (name, left, elapsed)
        assert c.do(b"peek %d" % ids["ready"]) == (
            b"FOUND %d %d" % (ids["ready"], len(BINARY)), BINARY
        )
        for name in ("buried", "reserved", "released", "kicked"):
            assert c.do(b"peek %d" % ids[name])[1] == name.encode()
        # Ids go on after the highest one ever given out, the deleted one included.
        assert c.put(b"new") == max(ids.values()) + 1
        st = c.yaml(b"stats")
        # Cumulative counters restart with the process, as in beanstalkd.
        assert (st["total-jobs"], st["cmd-delete"]) == ("1", "0")
        assert int(st["binlog-current-index"]) >= 2
        assert st["binlog-max-size"] == "10485760"
        assert int(c.yaml(b"stats-job %d" % ids["ready"])["file"]) >= 1
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_ids_never_repeat_across_graceful_restarts(kind: str, tmp_path: Path) -> None:
    seen: list[int] = []
    for _ in range(3):
        with server(kind, tmp_path, "-s", "4096") as proc:
            c = Conn(proc.port)
            for _ in range(40):
                jid = c.put(b"x" * 200)
                seen.append(jid)
                assert c.do(b"delete %d" % jid)[0] == b"DELETED"
            st = c.yaml(b"stats")
            c.close()
            assert proc.stop() == 0
    assert seen == list(range(1, 121))
    # The old segments held nothing live and are gone; ids still did not restart.
    if kind == "bundled":
        assert int(st["binlog-oldest-index"]) > 1


@pytest.mark.parametrize("kind", KINDS)
def test_ids_taken_at_put_lines_come_back_after_a_crash(kind: str, tmp_path: Path) -> None:
    # A put takes its id at its line: jobs reach the log out of id order, with a gap.
    with server(kind, tmp_path, "-f", "0") as first:
        early, other, gone = Conn(first.port), Conn(first.port), Conn(first.port)

        def put_lines_read(count: int) -> Callable[[], bool]:
            return lambda: other.yaml(b"stats")["cmd-put"] == str(count)

        early.sock.sendall(b"put 0 0 60 1\r\n")
        wait_until(put_lines_read(1), timeout=60, message="the early put line read")
        assert other.put(b"B") == 2
        assert early.do(b"A")[0] == b"INSERTED 1"
        gone.sock.sendall(b"put 0 0 60 3\r\nxy")
        wait_until(put_lines_read(3), timeout=60, message="the unfinished put line read")
        gone.close()  # id 3 is used up, and its job never existed
        assert other.put(b"C") == 4
        first.crash()
    with server(kind, tmp_path, "-f", "0") as second:
        c = Conn(second.port)
        assert [c.do(b"peek %d" % i) for i in (1, 2, 3, 4)] == [
            (b"FOUND 1 1", b"A"), (b"FOUND 2 1", b"B"), (b"NOT_FOUND", None), (b"FOUND 4 1", b"C")
        ]
        # Equal priorities: by id, whatever order the log holds them in.
        assert [c.do(b"reserve-with-timeout 0")[1] for _ in range(3)] == [b"A", b"B", b"C"]
        assert c.put(b"new") == 5
        c.close()


def test_recovery_is_logged_and_a_torn_tail_is_cut(tmp_path: Path) -> None:
    with server("bundled", tmp_path, "-f", "0") as proc:
        c = Conn(proc.port)
        ids = [c.put(b"job%d" % i) for i in range(5)]
        c.close()
        assert proc.stop() == 0
    newest = max(tmp_path.glob("binlog.*"), key=lambda p: int(p.suffix[1:]))
    with newest.open("ab") as f:
        f.write(b"\xde\xc0\x1b\x5a torn half of a record")
    with server("bundled", tmp_path, "-f", "0") as proc:
        c = Conn(proc.port)
        assert [c.do(b"peek %d" % i)[1] for i in ids] == [b"job%d" % i for i in range(5)]
        assert c.put(b"more") == 6
        c.close()
        assert proc.stop() == 0
        log = proc.stderr()
    assert "recovered 5 jobs" in log, log
    assert re.search(rf"{re.escape(str(newest))} at offset \d+: torn-tail", log), log


def test_second_server_on_the_same_directory_fails_clearly(tmp_path: Path) -> None:
    with server("bundled", tmp_path) as first:
        c = Conn(first.port)
        c.put(b"mine")
        second = subprocess.run(
            [*SERVER, "-p", str(free_port()), "-b", str(tmp_path)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert lines[-1].startswith("cmdstalk-server: binlog directory"), second.stderr
        assert f"locked by process {first.proc.pid}" in lines[-1]
        # The first one is unharmed.
        assert c.do(b"peek 1") == (b"FOUND 1 4", b"mine")
        c.close()


def test_unusable_directory_fails_clearly(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = subprocess.run([*SERVER, "-p", str(free_port()), "-b", str(blocker / "sub")],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("cmdstalk-server: cannot create")


# ------------------------------------------------------------------ disk errors


def test_disk_errors_are_answered_and_survived(tmp_path: Path) -> None:
    ops = FaultyOps(str(tmp_path))
    with EmbeddedServer(binlog_dir=str(tmp_path), fsync_ms=0, file_ops=ops) as srv:
        c, other = Conn(srv.address[1]), Conn(srv.address[1])
        assert c.put(b"kept") == 1
        ops.inject("pwrite", errno.ENOSPC, times=1000)
        assert c.do(b"put 0 0 60 4", b"lost") == (b"OUT_OF_MEMORY", None)
        assert c.do(b"delete 1") == (b"INTERNAL_ERROR", None)
        assert other.do(b"list-tube-used") == (b"USING default", None)
        ops.clear()  # space is back
        assert c.put(b"late") == 3
        # A failing fsync: the reply waits (nothing unsynced is acknowledged) and is sent
        # once an fsync works.
        ops.inject("fdatasync", errno.EIO, times=1000)
        c.sock.sendall(b"put 0 0 60 4\r\nsync\r\n")
        c.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            c.reply()
        c.sock.settimeout(60)
        ops.clear()
        assert c.reply() == (b"INSERTED 4", None)
        c.close()
        other.close()
    with EmbeddedServer(binlog_dir=str(tmp_path), fsync_ms=0) as srv:
        c = Conn(srv.address[1])
        assert [c.do(b"peek %d" % i)[1] for i in (1, 2, 3, 4)] == [
            b"kept", None, b"late", b"sync"
        ]
        c.close()


def test_pipelined_puts_share_fsyncs(tmp_path: Path) -> None:
    ops = FaultyOps(str(tmp_path))
    with EmbeddedServer(binlog_dir=str(tmp_path), fsync_ms=0, file_ops=ops) as srv:
        c = Conn(srv.address[1])
        c.put(b"first")
        before = ops.fsyncs
        c.sock.sendall(b"put 0 0 60 1\r\nx\r\n" * 200)
        assert [c.reply()[0] for _ in range(200)] == [b"INSERTED %d" % i for i in range(2, 202)]
        assert ops.fsyncs - before < 40, "no group commit"
        c.close()


class ZeroFillWatch(FaultyOps):
    """Counts records of 60 KB bodies, and calls ``on_zero_fill(records)`` when the binlog
    writes preallocated zeros (its maintenance step). Both run on the server's thread."""

    on_zero_fill: Callable[[int], None] | None = None
    big_records = 0

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if len(data) >= 4096:
            if data.strip(b"\0"):
                self.big_records += 1
            elif self.on_zero_fill is not None:
                self.on_zero_fill(self.big_records)
        return super().pwrite(fd, data, offset)


def test_f0_replies_go_out_before_the_maintenance_step(tmp_path: Path) -> None:
    ops = ZeroFillWatch(str(tmp_path))
    body = b"b" * 60_000
    puts = 30  # 1.8 MB: past the first preallocated megabyte's halfway mark
    with EmbeddedServer(binlog_dir=str(tmp_path), fsync_ms=0, file_ops=ops) as srv:
        c = Conn(srv.address[1])
        checks: list[tuple[int, int]] = []  # (reply bytes the client holds, expected)

        def replies_already_sent(records: int) -> None:
            # Every put logged so far was fsynced by this tick: its reply must be out.
            held = fcntl.ioctl(c.sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
            expected = sum(len(b"INSERTED %d\r\n" % i) for i in range(1, records + 1))
            checks.append((int.from_bytes(held, sys.byteorder), expected))

        ops.on_zero_fill = replies_already_sent
        # Nothing is read until the end: the client's receive queue counts what was sent.
        c.sock.sendall(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body) * puts)
        wait_until(lambda: ops.big_records == puts, 20, message="every put logged")
        assert [c.reply() for _ in range(puts)] == [
            (b"INSERTED %d" % i, None) for i in range(1, puts + 1)
        ]
        c.close()
    assert checks, "no maintenance step wrote zeros"
    assert all(held == expected for held, expected in checks), checks

def test_embedded_without_binlog_shows_segment_size() -> None:
    with EmbeddedServer(segment_size=5000) as srv:
        c = Conn(srv.address[1])
        st = c.yaml(b"stats")
        assert (st["binlog-max-size"], st["binlog-current-index"]) == ("5000", "0")
        c.close()


def test_f0_quit_and_eof_close_after_the_held_replies(tmp_path: Path) -> None:
    with EmbeddedServer(binlog_dir=str(tmp_path), fsync_ms=0) as srv:
        c = Conn(srv.address[1])
        c.sock.sendall(b"put 0 0 60 1\r\nx\r\nquit\r\nput 0 0 60 1\r\ny\r\n")
        assert c.reply() == (b"INSERTED 1", None)
        with pytest.raises(EOFError):
            c.reply()
        c = Conn(srv.address[1])
        c.sock.sendall(b"put 0 0 60 1\r\nz\r\ndelete 1\r\n")
        c.sock.shutdown(socket.SHUT_WR)
        assert [c.reply(), c.reply()] == [(b"INSERTED 2", None), (b"DELETED", None)]
        with pytest.raises(EOFError):
            c.reply()


def test_f50_syncs_on_the_timer_and_F_never(tmp_path: Path) -> None:
    ops = FaultyOps(str(tmp_path / "f50"))
    with EmbeddedServer(binlog_dir=str(tmp_path / "f50"), fsync_ms=50, file_ops=ops) as srv:
        c = Conn(srv.address[1])
        c.put(b"a")
        wait_until(lambda: ops.fsyncs > 0, timeout=60, message="first fsync")
        before = ops.fsyncs
        c.put(b"b")  # most likely within 50 ms of the first fsync: the timer's turn
        wait_until(lambda: ops.fsyncs > before, timeout=60, message="timer-driven fsync")
        c.close()
    ops = FaultyOps(str(tmp_path / "never"))
    with EmbeddedServer(binlog_dir=str(tmp_path / "never"), fsync_never=True,
                        file_ops=ops) as srv:  # fmt: skip
        c = Conn(srv.address[1])
        assert [c.put(b"n") for _ in range(50)] == list(range(1, 51))
        c.close()
    assert ops.fsyncs == 0
    with EmbeddedServer(binlog_dir=str(tmp_path / "never")) as srv:
        c = Conn(srv.address[1])
        assert c.put(b"after") == 51
        c.close()
