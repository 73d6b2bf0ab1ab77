"""``cmdstalk-ctl`` on jobs: put, peek, show, kick, delete, pause; exit codes; safe output."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path

from tests.ctl.run import ctl, out
from tests.helpers import BeanstalkServer, free_port


def test_put_then_peek_show_and_delete(beanstalk: BeanstalkServer) -> None:
    a = beanstalk.address
    first = ctl(a, "put", "mail", "hello world", "--priority", "7", "--ttr", "30")
    assert first.returncode == 0, first.stderr
    job_id = int(out(first))
    from_stdin = ctl(a, "put", "mail", stdin=b"from stdin\n")
    assert int(out(from_stdin)) > job_id
    peeked = ctl(a, "peek", "ready", "mail")
    assert peeked.returncode == 0
    assert f"job {job_id}: pri 7" in out(peeked) and "hello world" in out(peeked)
    shown = ctl(a, "show", str(job_id), "--json")
    record = json.loads(out(shown))
    assert record["stats"]["ttr"] == 30 and record["body"] == {"size": 11, "text": "hello world"}
    deleted = ctl(a, "delete", str(job_id), "999999")
    assert deleted.returncode == 1  # one of them was not there
    assert out(deleted) == f"deleted {job_id}\n" and b"999999" in deleted.stderr
    assert ctl(a, "show", str(job_id)).returncode == 1
    assert ctl(a, "peek", "buried", "mail").returncode == 1


def test_put_one_job_per_line_of_a_file(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.write_bytes(b"one\ntwo\n\nthree\n")
    result = ctl(beanstalk.address, "put", "mail", "--file", str(jobs), "--delay", "100")
    assert result.returncode == 0, result.stderr
    assert len(out(result).split()) == 3
    assert beanstalk.client().stats_tube("mail")["current-jobs-delayed"] == 3


def test_put_from_stdin_is_one_job_unless_lines(beanstalk: BeanstalkServer) -> None:
    """All of stdin, byte for byte, is one job; --lines makes one job per line (blank ones
    skipped, LF or CRLF removed), as --file - does."""
    a = beanstalk.address
    stdin = "one\ntwo\r\n\nthree"
    whole = ctl(a, "put", "mail", stdin=stdin.encode())
    assert whole.returncode == 0, whole.stderr
    c = beanstalk.client()
    assert c.peek(int(out(whole))).body == stdin
    each = ctl(a, "put", "mail", "--lines", stdin=stdin.encode())
    assert each.returncode == 0, each.stderr
    assert [c.peek(int(i)).body for i in out(each).split()] == ["one", "two", "three"]
    assert ctl(a, "put", "mail", "body", "--lines").returncode == 2


def test_bodies_never_reach_the_terminal_raw(beanstalk: BeanstalkServer) -> None:
    a = beanstalk.address
    evil = int(out(ctl(a, "put", "t", stdin="\x1b]0;owned\x07\x1b[2Jtext\r\x9b".encode())))
    binary = int(out(ctl(a, "put", "t", stdin=bytes(range(256)))))
    text = out(ctl(a, "show", str(evil)))  # out() checks that no control byte got through
    assert "\\x1b]0;owned\\x07\\x1b[2Jtext\\r\\x9b" in text
    dump = out(ctl(a, "show", str(binary), "--bytes", "32"))
    assert "00000000  00 01 02 03" in dump and "224 more bytes" in dump
    assert json.loads(out(ctl(a, "show", str(binary), "--json")))["body"]["size"] == 256
    assert all(len(line) <= 80 for line in dump.splitlines())


def test_kick_kick_job_and_pause(beanstalk: BeanstalkServer) -> None:
    a = beanstalk.address
    c = beanstalk.client(use="mail", watch="mail")
    for _ in range(3):
        c.put(b"x")
        c.bury(c.reserve(5))
    kicked = ctl(a, "kick", "mail", "2")
    assert out(kicked) == f"{a}: kicked 2 jobs in mail\n"
    buried = c.peek_buried().id
    assert out(ctl(a, "kick-job", str(buried))) == f"kicked {buried}\n"
    assert c.stats_tube("mail")["current-jobs-ready"] == 3
    assert ctl(a, "pause", "mail", "30").returncode == 0
    assert c.stats_tube("mail")["pause"] == 30
    assert ctl(a, "pause", "nosuchtube", "30").returncode == 1


def test_exit_codes_for_usage_and_unreachable(beanstalk: BeanstalkServer) -> None:
    down = f"127.0.0.1:{free_port()}"
    assert ctl(down, "stats").returncode == 3
    assert ctl(down, "put", "mail", "x").returncode == 3
    both = ctl(f"{beanstalk.address},{down}", "tubes")
    assert both.returncode == 3 and "default" in out(both)  # what answered is shown
    assert ctl(beanstalk.address, "peek", "sideways", "mail").returncode == 2
    assert ctl(beanstalk.address, "put", "-bad-name", "x").returncode == 2
    assert ctl(f"{beanstalk.address},{down}", "show", "1").returncode == 2  # ids: one server
    assert ctl("host:99999", "stats").returncode == 2
    # put fails over to the next server that answers
    assert ctl(f"{down},{beanstalk.address}", "put", "mail", "x").returncode == 0


def test_stats_and_tubes_show_every_server(
    real_beanstalkd: BeanstalkServer, bundled_server: BeanstalkServer
) -> None:
    both = f"{real_beanstalkd.address},{bundled_server.address}"
    bundled_server.client(use="only-bundled").put(b"x")
    stats = out(ctl(both, "stats"))
    assert real_beanstalkd.address in stats.splitlines()[0]
    assert bundled_server.address in stats.splitlines()[0]
    assert all(len(line) <= 80 for line in stats.splitlines())
    tubes = json.loads(out(ctl(both, "tubes", "--json")))
    assert "only-bundled" in tubes[bundled_server.address]
    assert "only-bundled" not in tubes[real_beanstalkd.address]
    real_beanstalkd.client(use="t" * 200).put(b"x")  # the longest name still fits
    table = out(ctl(both, "tubes"))
    assert f"{real_beanstalkd.address}:" in table and "only-bundled" in table
    assert all(len(line) <= 80 for line in table.splitlines()) and "ttt~" in table


def test_a_server_that_hangs_up_or_goes_silent_is_exit_3() -> None:
    """A peer that accepts then closes, or accepts and never answers: a one-line error and
    exit 3, never a traceback and never a hang (``--timeout``)."""
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    held: list[socket.socket] = []
    silent = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                if silent.is_set():
                    held.append(conn)  # never answered
                else:
                    conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for command in (["stats"], ["tubes"], ["show", "1"], ["clear", "t", "-s", "ready", "-y"]):
            result = ctl(address, *command)
            assert result.returncode == 3, (command, result.stderr)
            assert b"Traceback" not in result.stderr and result.stderr.count(b"\n") == 1
        silent.set()
        result = ctl(None, "--address", address, "--timeout", "0.5", "stats")
        assert result.returncode == 3 and b"timed out" in result.stderr
    finally:
        listener.close()
        for conn in held:
            conn.close()
