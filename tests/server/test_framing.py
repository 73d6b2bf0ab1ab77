"""The sans-IO framer: bytes in, command events out, with no socket and no engine."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.framing import (
    LINE_TOO_LONG,
    BodySkipped,
    Event,
    Framer,
    Mode,
    PutBody,
)

#: A small ``-z`` so that a rejected body is short enough to split everywhere.
MAX_JOB_SIZE = 10

TOO_BIG = p.Rejected(p.JOB_TOO_BIG, "put", 22)

#: Pipelined input touching every mode, and what it must come out as.
PIPELINE = (
    b"use foo\r\n"
    + b"put 1 2 3 5\r\nhello\r\n"
    + b"put 0 0 60 4\r\n\r\n\r\n\r\n"  # a body made of CRLFs
    + b"put 0 0 60 3\r\nabcde\r\n"  # no CRLF where the body ends, then an empty line
    + b"put 0 0 1 20\r\n" + b"z" * 22  # JOB_TOO_BIG: thrown away before the reply
    + b"x" * 300 + b"\r\n"  # a line past the window: BAD_FORMAT once its CRLF comes
    + b"bad\x00line\r\n"
    + b"reserve\r\n"
    + b"put 0 0 1 0\r\n\r\n"
    + b"quit\r\n"
)
EXPECTED: list[Event] = [
    p.Use(b"foo"),
    p.Put(1, 2, 3, 5),
    PutBody(p.Put(1, 2, 3, 5), b"hello\r\n"),
    p.Put(0, 0, 60, 4),
    PutBody(p.Put(0, 0, 60, 4), b"\r\n\r\n\r\n"),
    p.Put(0, 0, 60, 3),
    PutBody(p.Put(0, 0, 60, 3), b"abcde"),
    p.REJECT_UNKNOWN,
    TOO_BIG,
    BodySkipped(TOO_BIG),
    LINE_TOO_LONG,
    p.REJECT_BAD_FORMAT,
    p.RESERVE,
    p.Put(0, 0, 1, 0),
    PutBody(p.Put(0, 0, 1, 0), b"\r\n"),
    p.QUIT,
]


def as_lines(events: list[Event]) -> list[Event]:
    """The stream with each put as its line then its body, however the input was cut.

    A put whose body came with its line is one event; one whose body was still on its way
    was announced by its line first: both mean the same line, then the same body.
    """
    out: list[Event] = []
    for event in events:
        if isinstance(event, PutBody):
            if not event.announced:
                out.append(event.put)
            event = PutBody(event.put, event.body)
        out.append(event)
    return out


def drain(framer: Framer) -> list[Event]:
    """Every event the framer can give now."""
    events: list[Event] = []
    while (event := framer.next_event()) is not None:
        events.append(event)
    return events


def mode_of(framer: Framer) -> Mode:
    """The framer's mode (a call, so that the type checker does not pin it)."""
    return framer.mode


def feed(chunks: list[bytes], max_job_size: int = MAX_JOB_SIZE) -> tuple[list[Event], Framer]:
    framer = Framer(max_job_size)
    events: list[Event] = []
    for chunk in chunks:
        framer.receive_data(chunk)
        events += drain(framer)
    return events, framer


def test_pipeline_in_one_piece() -> None:
    events, framer = feed([PIPELINE])
    assert as_lines(events) == EXPECTED
    assert [type(e) for e in as_lines(events)] == [type(e) for e in EXPECTED]
    # Every body came with its line: one event per put.
    assert not any(isinstance(e, p.Put) for e in events)
    assert mode_of(framer) is Mode.LINE
    assert framer.buffered == 0


def test_pipeline_split_at_every_byte_boundary() -> None:
    for cut in range(len(PIPELINE) + 1):
        events, framer = feed([PIPELINE[:cut], PIPELINE[cut:]])
        assert as_lines(events) == EXPECTED, cut
        assert framer.buffered == 0, cut


@given(cuts=st.lists(st.integers(0, len(PIPELINE)), max_size=12))
def test_pipeline_in_any_pieces(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(PIPELINE)]
    events, framer = feed([PIPELINE[a:b] for a, b in pairwise(bounds)])
    assert as_lines(events) == EXPECTED
    assert framer.buffered == 0


def test_pipeline_byte_by_byte() -> None:
    events, framer = feed([PIPELINE[i : i + 1] for i in range(len(PIPELINE))])
    assert as_lines(events) == EXPECTED
    assert framer.buffered == 0


def test_pipeline_read_before_being_pulled() -> None:
    """A connection that waits (blocked reserve) lets input pile up, then pulls it all."""
    framer = Framer(MAX_JOB_SIZE)
    for i in range(0, len(PIPELINE), 7):
        framer.receive_data(PIPELINE[i : i + 7])
    assert framer.buffered == len(PIPELINE)
    assert as_lines(drain(framer)) == EXPECTED


def test_pulling_stops_and_resumes_anywhere() -> None:
    """Unpulled events stay in the framer: one event at a time gives the same stream."""
    framer = Framer(MAX_JOB_SIZE)
    framer.receive_data(PIPELINE)
    events: list[Event] = []
    while (event := framer.next_event()) is not None:
        events.append(event)
        framer.receive_data(b"")  # the end of input changes nothing already received
    assert as_lines(events) == EXPECTED
    assert framer.eof


def test_events_gives_every_complete_event_in_one_pass() -> None:
    """``events()`` (what the connection iterates) gives the stream ``next_event`` does."""
    for size in (1, 7, len(PIPELINE)):
        framer = Framer(MAX_JOB_SIZE)
        events: list[Event] = []
        for i in range(0, len(PIPELINE), size):
            framer.receive_data(PIPELINE[i : i + size])
            events += framer.events()
        assert as_lines(events) == EXPECTED, size
        assert framer.buffered == 0, size


def test_events_not_run_go_back_and_come_out_first() -> None:
    """A turn stops at a blocked reserve, ``quit`` or its bounds: the events it did not run
    come out of the next pass, none lost, none twice, before what arrives meanwhile."""
    whole = feed([PIPELINE])[0]
    for taken in range(len(whole) + 1):
        framer = Framer(MAX_JOB_SIZE)
        framer.receive_data(PIPELINE)
        got = framer.events()
        assert got == whole, taken
        framer.unread(got[taken:])
        assert framer.pending == (taken < len(whole)), taken
        framer.receive_data(b"stats\r\n")
        assert framer.events() == [*whole[taken:], p.STATS], taken
        assert not framer.pending


def test_a_limited_pass_frames_no_further() -> None:
    """``events(limit)`` (a turn's command bound) leaves the rest of the input unframed."""
    whole = feed([PIPELINE])[0]
    for limit in range(1, len(whole) + 1):
        framer = Framer(MAX_JOB_SIZE)
        framer.receive_data(PIPELINE)
        first = framer.events(limit)
        assert first == whole[:limit], limit
        assert (framer.buffered > 0) == (limit < len(whole)), limit
        framer.unread(first[1:])
        assert framer.events() == whole[1:], limit


def test_modes_follow_the_announced_chunk() -> None:
    framer = Framer(MAX_JOB_SIZE)
    framer.receive_data(b"put 0 0 1 3\r\nab")
    assert framer.next_event() == p.Put(0, 0, 1, 3)
    assert mode_of(framer) is Mode.BODY
    assert framer.next_event() is None
    assert framer.buffered == 2
    framer.receive_data(b"c\r\nput 0 0 1 99\r\n")
    assert framer.next_event() == PutBody(p.Put(0, 0, 1, 3), b"abc\r\n", announced=True)
    assert mode_of(framer) is Mode.LINE
    rejected = framer.next_event()
    assert isinstance(rejected, p.Rejected)
    assert rejected == p.Rejected(p.JOB_TOO_BIG, "put", 101)
    assert mode_of(framer) is Mode.SKIP
    framer.receive_data(b"y" * 100)
    assert framer.next_event() is None
    assert framer.buffered == 0  # thrown away as it comes, never kept
    framer.receive_data(b"y" + b"stats\r\n")
    assert framer.next_event() == BodySkipped(rejected)
    assert framer.next_event() == p.STATS


def test_long_body_in_many_reads() -> None:
    body = bytes(range(256)) * 40
    framer = Framer(len(body))
    framer.receive_data(b"put 0 0 1 %d\r\n" % len(body))
    assert framer.next_event() == p.Put(0, 0, 1, len(body))
    for i in range(0, len(body), 1000):
        framer.receive_data(body[i : i + 1000])
        assert framer.next_event() is None
    framer.receive_data(b"\r\nreserve\r\n")
    assert framer.next_event() == PutBody(
        p.Put(0, 0, 1, len(body)), body + b"\r\n", announced=True
    )
    assert framer.next_event() == p.RESERVE


def test_a_put_with_its_body_at_hand_is_one_event() -> None:
    """Line and body in the input: one event; a body still to come: the line first."""
    framer = Framer(MAX_JOB_SIZE)
    framer.receive_data(b"put 0 0 1 3\r\nabc\r\nput 0 0 1 3\r\nab")
    assert framer.next_event() == PutBody(p.Put(0, 0, 1, 3), b"abc\r\n", announced=False)
    assert framer.next_event() == p.Put(0, 0, 1, 3)
    assert framer.next_event() is None
    framer.receive_data(b"c\r\n")
    assert framer.next_event() == PutBody(p.Put(0, 0, 1, 3), b"abc\r\n", announced=True)


def test_bare_cr_stalls_until_the_window_is_full() -> None:
    framer = Framer()
    framer.receive_data(b"stats\rjunk\r\n")
    assert framer.next_event() is None
    framer.receive_data(b"y" * 220 + b"\r\nlist-tube-used\r\n")
    assert framer.next_event() == LINE_TOO_LONG
    assert framer.next_event() == p.LIST_TUBE_USED


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (p.LINE_LIMIT - 2, [p.REJECT_UNKNOWN, p.STATS]),
        # The CR is the window's last byte: the window goes, and the discarding runs on to
        # the next CRLF, the one ending "stats".
        (p.LINE_LIMIT - 1, [LINE_TOO_LONG]),
        (p.LINE_LIMIT, [LINE_TOO_LONG, p.STATS]),
    ],
)
def test_window_edge(size: int, expected: list[Event]) -> None:
    """A line is read if it and its CRLF fit in the window."""
    events, _ = feed([b"x" * size + b"\r\nstats\r\n"], p.DEFAULT_MAX_JOB_SIZE)
    assert events == expected


def test_endless_line_is_discarded_as_it_comes() -> None:
    framer = Framer()
    for _ in range(100):
        framer.receive_data(b"x" * 1000)
        assert framer.next_event() is None
        assert framer.buffered < p.LINE_LIMIT
    assert mode_of(framer) is Mode.LONG_LINE
    framer.receive_data(b"\r\nstats\r\n")
    assert drain(framer) == [LINE_TOO_LONG, p.STATS]


def test_end_of_input_keeps_what_was_received() -> None:
    framer = Framer()
    framer.receive_data(b"stats\r\nput 0 0 1 5\r\nab")
    framer.receive_data(b"")
    assert framer.eof
    assert drain(framer) == [p.STATS, p.Put(0, 0, 1, 5)]
    assert framer.buffered == 2
