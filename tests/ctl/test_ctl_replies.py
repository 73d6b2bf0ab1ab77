"""ctl's reply parsers (pure) and its bounded wire (on a socket pair), without a server."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from cmdstalk_py.ctl.replies import (
    Buried,
    NotFound,
    ServerFault,
    parse_number,
    parse_reply,
    parse_stats,
    parse_tube_list,
)
from cmdstalk_py.ctl.wire import LINE_LIMIT, Wire


def test_reply_values_and_error_words() -> None:
    assert parse_reply(b"FOUND 7 3", b"FOUND", 2) == [b"7", b"3"]
    with pytest.raises(NotFound):
        parse_reply(b"NOT_FOUND", b"FOUND", 2)
    with pytest.raises(Buried) as buried:
        parse_reply(b"BURIED 9", b"INSERTED", 1)
    assert buried.value.job_id == 9
    assert parse_reply(b"BURIED", b"BURIED", 0) == []  # the expected word of a bury
    for line, said in [(b"DRAINING", "draining"), (b"FOUND 7", "unexpected reply 'FOUND 7'"),
                       (b"BURIED x", "not a number"), (b"\x1b[2J", "\\x1b[2J")]:  # fmt: skip
        with pytest.raises(ServerFault, match=re.escape(said)):
            parse_reply(line, b"FOUND", 2)


def test_numbers_are_digits_and_bounded() -> None:
    assert parse_number(b"18446744073709551615") == 2**64 - 1
    for bad in (b"", b"-1", b"1e3", b"1" * 21, b"\xd9\xa3"):
        with pytest.raises(ServerFault):
            parse_number(bad)


def test_stats_yaml() -> None:
    stats = parse_stats(b'---\nid: 3\nname: "mail"\nversion: 1.12\nneg: -2\n')
    assert stats == {"id": 3, "name": "mail", "version": "1.12", "neg": -2}
    for bad in (b"id: 3\n", b"---\nid 3\n", b"---\n: 3\n", "---\nos: é\n".encode()):
        with pytest.raises(ServerFault):
            parse_stats(bad)
    assert parse_tube_list(b"---\n- default\n- a.b\n") == ["default", "a.b"]
    for bad in (b"---\n- a b\n", b"---\n-default\n", b"---\n- \r\n"):
        with pytest.raises(ServerFault):
            parse_tube_list(bad)


@pytest.fixture
def pair() -> Iterator[tuple[Wire, socket.socket]]:
    ours, theirs = socket.socketpair()
    try:
        yield Wire(ours, timeout=1.0), theirs
    finally:
        ours.close()
        theirs.close()


def test_wire_frames_lines_and_blocks(pair: tuple[Wire, socket.socket]) -> None:
    wire, server = pair
    server.sendall(b"OK 3\r\nabc\r\nUSING t\n")
    wire.send(b"stats\r\n")
    assert wire.line() == b"OK 3" and wire.block(3, 3, "body") == b"abc"
    with pytest.raises(ServerFault, match="LF alone"):
        wire.line()


def test_wire_refuses_what_it_was_not_asked_for(pair: tuple[Wire, socket.socket]) -> None:
    wire, server = pair
    server.sendall(b"KICKED\r\nKICKED\r\n")
    wire.send(b"kick-job 1\r\n")
    assert wire.line() == b"KICKED"
    with pytest.raises(ServerFault, match="nobody asked for"):
        wire.send(b"kick-job 2\r\n")


def test_wire_caps_lines_and_blocks(pair: tuple[Wire, socket.socket]) -> None:
    wire, server = pair
    wire.send(b"stats\r\n")
    with pytest.raises(ServerFault, match="over ctl's limit of 10"):
        wire.block(11, 10, "body")  # refused before a byte is read
    server.sendall(b"x" * LINE_LIMIT)
    with pytest.raises(ServerFault, match="runs past"):
        wire.line()


def test_wire_deadline_is_for_the_whole_reply(pair: tuple[Wire, socket.socket]) -> None:
    """A byte every 0.2 s never lets a 1 s reply deadline pass unnoticed."""
    wire, server = pair
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.2):
            server.sendall(b"x")

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        wire.send(b"stats\r\n")
        start = time.monotonic()
        with pytest.raises(ServerFault, match="timed out"):
            wire.line()
        assert time.monotonic() - start < 10  # bounded by the deadline, not the trickle
    finally:
        stop.set()
        thread.join()
