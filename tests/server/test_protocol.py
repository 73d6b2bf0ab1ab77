"""The pure protocol layer: command lines in, command values out; reply rendering."""

from __future__ import annotations

import pytest

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.protocol import parse_command


def rejected(line: bytes, max_job_size: int = 65535) -> p.Rejected:
    cmd = parse_command(line, max_job_size)
    assert isinstance(cmd, p.Rejected), cmd
    return cmd


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"put 1 2 3 4", p.Put(1, 2, 3, 4)),
        (b"put  0  0  60  1", p.Put(0, 0, 60, 1)),
        (b"put 00 060 0 0", p.Put(0, 60, 0, 0)),
        (b"put 4294967295 4294967295 4294967295 5", p.Put(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 5)),
        (b"reserve", p.RESERVE),
        (b"reserve-with-timeout 5", p.Reserve(5, True)),
        (b"reserve-job 7", p.ReserveJob(7)),
        (b"delete 18446744073709551615", p.Delete(2**64 - 1)),
        (b"delete  5", p.Delete(5)),
        (b"release 1 2 3", p.Release(1, 2, 3)),
        (b"bury 1 2", p.Bury(1, 2)),
        (b"touch 9", p.Touch(9)),
        (b"use foo", p.Use(b"foo")),
        (b"watch a-b+c/d;e.f$g_h(i)", p.Watch(b"a-b+c/d;e.f$g_h(i)")),
        (b"ignore x", p.Ignore(b"x")),
        (b"peek 3", p.Peek(3)),
        (b"peek-ready", p.PEEK_READY),
        (b"peek-delayed", p.PEEK_DELAYED),
        (b"peek-buried", p.PEEK_BURIED),
        (b"kick 10", p.Kick(10)),
        (b"kick-job 4", p.KickJob(4)),
        (b"stats-job 4", p.StatsJob(4)),
        (b"stats-tube default", p.StatsTube(b"default")),
        (b"stats", p.STATS),
        (b"list-tubes", p.LIST_TUBES),
        (b"list-tube-used", p.LIST_TUBE_USED),
        (b"list-tubes-watched", p.LIST_TUBES_WATCHED),
        (b"pause-tube foo 10", p.PauseTube(b"foo", 10)),
        (b"pause-tube   foo   0", p.PauseTube(b"foo", 0)),
        (b"pause-tubefoo 10", p.PauseTube(b"foo", 10)),
        (b"quit", p.QUIT),
        (b"quit ", p.QUIT),
        (b"quitx", p.QUIT),
    ],
)
def test_valid_lines(line: bytes, expected: p.Command) -> None:
    assert parse_command(line) == expected
    assert type(parse_command(line)) is type(expected)


@pytest.mark.parametrize(
    "line",
    [
        b"", b"STATS", b" stats", b"put", b"peek", b"delete", b"release", b"bury", b"touch",
        b"kick", b"kick-job", b"use", b"watch", b"ignore", b"hello world",
    ],
)
def test_unknown_command(line: bytes) -> None:
    assert rejected(line).reply == p.UNKNOWN_COMMAND


@pytest.mark.parametrize(
    "line",
    [
        # Prefix matches of argument-less commands must be exact.
        b"reserve-with-timeout", b"reserve-job", b"reservex", b"reserve ",
        b"stats-job", b"stats-tube", b"statsx", b"stats ", b"pause-tube", b"pause-tube ",
        b"list-tubesx", b"peek-ready ", b"list-tube-used x", b"peek-delayedx",
        # Arguments missing, extra, signed, out of range, trailing space.
        b"put ", b"delete ", b"use ", b"delete 5 ", b"delete 5x", b"delete 1 2", b"delete -1",
        b"delete +1", b"delete abc", b"delete 18446744073709551616", b"put 4294967296 0 0 1",
        b"put 0 0 0", b"put -1 0 0 1", b"release 1 4294967296 0", b"release 1 2",
        b"bury 1", b"bury 1 2 3", b"touch 1 ", b"peek x", b"kick-job ",
        b"kick abc", b"kick ", b"kick -abc", b"kick 18446744073709551616",
        b"reserve-with-timeout 9223372036854775808",
        b"reserve-with-timeout -9223372036854775809",
        # Names.
        b"use  foo", b"use foo ", b"use foo bar", b"use -foo", b"use foo@", b"use " + b"a" * 201,
        b"watch \xc3\xa9", b"stats-tube a*b", b"ignore ",
        # pause-tube: name run, then a number up to the end of the line.
        b"pause-tube foo@ 1", b"pause-tube foo", b"pause-tube @", b"pause-tube foo 1 ",
        b"pause-tube -x",
        # NUL anywhere.
        b"use fo\x00o", b"put 0 0 1 1\x00", b"stats\x00", b"\x00",
    ],
)
def test_bad_format_not_counted(line: bytes) -> None:
    r = rejected(line)
    assert r.reply == p.BAD_FORMAT
    assert r.counter is None
    assert r.skip == 0


def test_long_names() -> None:
    assert parse_command(b"use " + b"a" * 200) == p.Use(b"a" * 200)
    assert rejected(b"watch " + b"a" * 201).reply == p.BAD_FORMAT


def test_put_counted_rejections() -> None:
    # Counted once the four numbers parse: trailing garbage, JOB_TOO_BIG.
    assert rejected(b"put 0 0 1 5x") == p.Rejected(p.BAD_FORMAT, "put", 0)
    assert rejected(b"put 0 0 1 5 ") == p.Rejected(p.BAD_FORMAT, "put", 0)
    assert rejected(b"put 0 0 1 70000") == p.Rejected(p.JOB_TOO_BIG, "put", 70002)
    # JOB_TOO_BIG is decided before the trailing-garbage check.
    assert rejected(b"put 0 0 1 70000 junk") == p.Rejected(p.JOB_TOO_BIG, "put", 70002)
    assert parse_command(b"put 0 0 1 65535") == p.Put(0, 0, 1, 65535)
    assert rejected(b"put 0 0 1 11", max_job_size=10).reply == p.JOB_TOO_BIG


def test_pause_tube_counted_before_name_check() -> None:
    assert rejected(b"pause-tube -x 1") == p.Rejected(p.BAD_FORMAT, "pause-tube")
    assert rejected(b"pause-tube " + b"a" * 201 + b" 1") == p.Rejected(p.BAD_FORMAT, "pause-tube")


@pytest.mark.parametrize(
    ("line", "bound"),
    [
        (b"kick 5", 5), (b"kick 5 junk", 5), (b"kick  5", 5), (b"kick +5", 5),
        (b"kick -1", 0xFFFFFFFF), (b"kick 4294967297", 1), (b"kick 0", 0),
        (b"kick 18446744073709551615", 0xFFFFFFFF),
    ],
)
def test_kick_strtoul_leniency(line: bytes, bound: int) -> None:
    assert parse_command(line) == p.Kick(bound)


@pytest.mark.parametrize(
    ("line", "timeout"),
    [
        (b"reserve-with-timeout 0", 0), (b"reserve-with-timeout abc", 0),
        (b"reserve-with-timeout ", 0), (b"reserve-with-timeout 5 junk", 5),
        (b"reserve-with-timeout -1", -1), (b"reserve-with-timeout -100", -1),
        (b"reserve-with-timeout 4294967296", 0), (b"reserve-with-timeout 4294967297", 1),
        (b"reserve-with-timeout 2147483648", -1), (b"reserve-with-timeout \t7", 7),
    ],
)
def test_reserve_with_timeout_strtol_leniency(line: bytes, timeout: int) -> None:
    assert parse_command(line) == p.Reserve(timeout, True)


def test_word_lookup_agrees_with_ordered_prefix_scan() -> None:
    # The fast path looks commands up by their first word; for every such word no earlier
    # entry of 1.12's ordered prefix table may match, or the answers would differ.
    prefixes = [prefix for prefix, _fn in p._PREFIX_TABLE]
    for word in p._BY_WORD:
        line = word + b" x"
        first = next(pr for pr in prefixes if line.startswith(pr))
        assert first.rstrip(b" ") == word, (word, first)


def test_renderers() -> None:
    assert p.render_inserted(5) == b"INSERTED 5\r\n"
    assert p.render_reserved(3, b"ab\r\n") == b"RESERVED 3 2\r\nab\r\n"
    assert p.render_found(3, b"\r\n") == b"FOUND 3 0\r\n\r\n"
    assert p.render_ok(b"---\n") == b"OK 4\r\n---\n\r\n"
    assert p.render_using(b"foo") == b"USING foo\r\n"
    assert p.render_watching(2) == b"WATCHING 2\r\n"
    assert p.render_kicked(0) == b"KICKED 0\r\n"
    assert p.render_yaml_list([b"a", b"b"]) == b"---\n- a\n- b\n"
    assert all(v == k.encode() + b"\r\n" for k, v in p.REPLIES.items())


def test_strtol_scanner() -> None:
    assert p.c_strtol(b"  -12x") == (-12, True, False)
    assert p.c_strtol(b"x") == (0, False, False)
    assert p.c_strtol(b"+") == (0, False, False)


@pytest.mark.parametrize(
    "line",
    [
        b"put 1 2 3 4", b"put 4294967296 0 0 1", b"put 0 0 0 4294967295", b"put 0 0 1 65536",
        b"put 0 0 1 65535", b"delete 1", b"delete 9999999999999999999", b"touch 5", b"peek 0",
        b"reserve-job 3", b"kick-job 4", b"stats-job 6", b"reserve-with-timeout 999999999",
        b"reserve-with-timeout 0", b"reserve", b"stats", b"quit",
    ],
)
def test_fast_paths_agree_with_the_general_parser(line: bytes) -> None:
    assert p.parse_command(line) == p._parse_general(line, p.DEFAULT_MAX_JOB_SIZE)
    assert type(p.parse_command(line)) is type(p._parse_general(line, p.DEFAULT_MAX_JOB_SIZE))
