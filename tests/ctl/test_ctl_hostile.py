"""``cmdstalk-ctl`` against a broken or hostile server (#27 item 6), run on a terminal.

Whatever the server does (refuse, die mid-reply, garble the framing, announce huge
lengths, trickle, flood, send escape sequences), the operator gets one ``Error:`` line and
exit 3, within ``--timeout``, in bounded memory, and nothing from the server reaches the
terminal raw.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.ctl.hostile import Act, HostileServer, flood, hang_up, stats_body, trickle
from tests.ctl.run import OnTerminal, ctl_on_terminal

TIMEOUT = 2.0
#: The most a command may take, from its connection to its exit, against its --timeout:
#: connecting and the reply may each take up to --timeout; the rest is slack for a busy
#: machine.
WITHIN = 3 * TIMEOUT

JOB_YAML = b"id: 1\ntube: t\nstate: ready\npri: 0\nage: 0\ndelay: 0\nttr: 60\ntime-left: 0\n"


def _run(acts: dict[bytes, Act], *args: str) -> tuple[OnTerminal, str]:
    """``cmdstalk-ctl args…`` against a fake server doing ``acts`` (``SERVER`` in ``args``
    is its address), checked for what every run must keep: its time and a clean screen."""
    with HostileServer(acts) as server:
        args = tuple(a.replace("SERVER", server.address) for a in args)
        ran = ctl_on_terminal("--address", server.address, "--timeout", f"{TIMEOUT}", *args)
        reached = server.first_connection
    assert reached is not None, ran.screen
    took = ran.ended - reached
    assert took < WITHIN, f"took {took:.1f}s against --timeout {TIMEOUT}: {ran.screen!r}"
    assert b"\x1b" not in ran.screen and b"\x9b" not in ran.screen, ran.screen
    return ran, ran.screen.decode("utf-8")


def _failed(ran: OnTerminal, screen: str) -> str:
    """The one ``Error:`` line of a run that must end in exit 3."""
    assert ran.status == 3, screen
    assert "Traceback" not in screen, screen
    lines = screen.strip("\r\n").split("\r\n")
    assert len(lines) == 1 and lines[0].startswith("Error: "), screen
    return lines[0]


def _case(name: str, acts: dict[bytes, Act], args: str, said: str) -> Any:
    return pytest.param(acts, args.split(), said, id=name)


CASES = [
    _case("draining", {b"put": b"DRAINING\r\n"}, "put t x", "draining"),
    _case("out of memory", {b"put": b"OUT_OF_MEMORY\r\n"}, "put t x", "out of memory"),
    _case("internal error", {b"stats": b"INTERNAL_ERROR\r\n"}, "stats", "internal error"),
    _case("job too big", {b"put": b"JOB_TOO_BIG\r\n"}, "put t x", "max-job-size"),
    _case("dies mid-line", {b"stats": hang_up(b"OK 4")}, "stats", "closed the connection"),
    _case(
        "dies mid-body",
        {b"stats": hang_up(b"OK 40\r\n---\nuptime: 1\n")},
        "stats",
        "closed the connection",
    ),
    _case("bad length", {b"stats": b"OK 12x\r\n"}, "stats", "not a number"),
    _case("endless length", {b"stats": b"OK " + b"9" * 30 + b"\r\n"}, "stats", "not a number"),
    _case(
        "huge length",
        {b"peek-ready": b"FOUND 1 1073741824\r\n"},
        "peek ready t",
        "over ctl's limit",
    ),
    _case("LF-only line", {b"kick": b"KICKED 1\n"}, "kick t 5", "LF alone"),
    _case("body without CRLF", {b"stats": b"OK 4\r\n---\nxx"}, "stats", "not followed by CRLF"),
    _case("non-ASCII YAML", {b"stats": stats_body("os: café\n".encode())}, "stats", "not ASCII"),
    _case("not YAML", {b"stats": stats_body(b"uptime 1\n")}, "stats", "not 'key: value'"),
    _case(
        "stats-job lacking fields",
        {b"stats-job": stats_body(b"id: 1\n")},
        "show 1",
        "lacks a number",
    ),
    _case("garbled tube", {b"list-tubes": stats_body(b"- a b\n")}, "tubes", "not '- tube'"),
    _case("unknown word", {b"stats": b"HELLO\r\n"}, "stats", "unexpected reply 'HELLO'"),
    _case("escape", {b"stats": b"\x1b]0;owned\x07\r\n"}, "stats", "\\x1b]0;owned\\x07"),
    _case(
        "unasked bytes",
        {b"use": b"USING t\r\nINSERTED 7\r\n", b"put": b"INSERTED 8\r\n"},
        "put t x",
        "nobody asked for",
    ),
    _case("trickle", {b"stats": trickle(b"OK 1000\r\n", 0.5)}, "stats", "timed out"),
    _case("silent", {b"stats": trickle(b"", 3600)}, "stats", "timed out"),
]


@pytest.mark.parametrize(("acts", "args", "said"), CASES)
def test_a_bad_reply_is_one_error_line_and_exit_3(
    acts: dict[bytes, Act], args: list[str], said: str
) -> None:
    line = _failed(*_run(acts, *args))
    assert said in line, line


def test_a_gigabyte_without_newline_is_refused_in_bounded_memory() -> None:
    ran, screen = _run({b"stats": flood(b"", 2**30)}, "stats")
    assert "runs past 1024 bytes" in _failed(ran, screen)


def test_a_body_flood_under_a_huge_length_is_refused_unread() -> None:
    ran, screen = _run({b"stats": flood(b"OK 1073741824\r\n", 2**30)}, "stats")
    assert "over ctl's limit" in _failed(ran, screen)


def test_escape_sequences_in_stats_reach_the_terminal_escaped() -> None:
    """Keys and values a server invents are shown, escaped: an OSC sequence in a stats-job
    key does not retitle the terminal."""
    evil = b"\x1b]0;owned\x07"
    acts: dict[bytes, Act] = {
        b"stats-job": stats_body(JOB_YAML + evil + b": " + evil + b"\n"),
        b"peek": b"FOUND 1 4\r\nbody\r\n",
        b"stats": stats_body(evil + b"key: 1\nversion: " + evil + b"\n"),
    }
    ran, screen = _run(acts, "show", "1")
    assert ran.status == 0, screen
    assert "\\x1b]0;owned\\x07: \\x1b]0;owned\\x07" in screen and "body" in screen
    ran, screen = _run(acts, "stats")
    assert ran.status == 0, screen
    assert "\\x1b]0;owned\\x07key" in screen


def test_a_job_buried_at_once_is_printed_then_exit_3() -> None:
    """BURIED after a put: the job exists, so its id is printed before the error."""
    ran, screen = _run({b"put": b"BURIED 5\r\n"}, "put", "t", "x")
    assert ran.status == 3 and "Traceback" not in screen, screen
    assert screen.split("\r\n")[:2] == ["5", f"Error: {screen.split()[2]} job 5 was buried "
                                        "at once: the server is out of memory"]  # fmt: skip


def _http(body: bytes, length: int | None = None) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % (len(body) if length is None else length) + body


@pytest.mark.parametrize(
    ("act", "said"),
    [
        pytest.param(hang_up(_http(b'{"jobs": []}')), "not a list", id="not a list"),
        pytest.param(hang_up(_http(b"[" * 100_000)), "not a list", id="nested"),
        pytest.param(trickle(_http(b"[", 1000), 0.5), "timed out", id="trickle"),
        pytest.param(flood(_http(b"", 2**30), 2**30), "over 16777216 bytes", id="flood"),
    ],
)
def test_workers_from_a_hostile_dashboard_is_exit_3(act: Act, said: str) -> None:
    ran, screen = _run({b"GET": act}, "workers", "--from", "http://SERVER")
    assert ran.status == 3 and "Traceback" not in screen, screen
    assert "Error: cannot read http://127.0.0.1:" in screen and said in screen, screen


def test_workers_shows_odd_fields_of_a_dashboard_safely() -> None:
    odd = (rb'[{"tube": "\u001b]0;owned\u0007", "elapsed": "soon", "output": 5, "pid": [1],'
           rb' "memory_bytes": "lots", "cpu_s": NaN}]')  # fmt: skip
    ran, screen = _run({b"GET": hang_up(_http(odd))}, "workers", "--from", "http://SERVER")
    assert ran.status == 0, screen
    assert "\\x1b]0;owned\\x07" in screen and " - " in screen
    assert "lots" not in screen and "nan" not in screen.lower(), screen
