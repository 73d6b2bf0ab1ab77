"""Scenarios: framing, command recognition, argument and name parsing (§1-§3)."""

from __future__ import annotations

from tests.server.difftools.steps import (
    ScenarioList,
    Step,
    Want,
    cmd,
    eof,
    put,
    recv,
    send,
    silent,
    tx,
)

# Every byte §2 forbids in a tube name (space and tab included), plus non-ASCII.
BAD_NAME_BYTES = b" \t@*!#,:'\"=?%&~|\\<>^`[]{}\x7f\x80\xe9\xff"
ALLOWED_SPECIALS = "-+/;.$_()"


def lines(conn: int, pairs: list[tuple[str | bytes, Want]]) -> list[Step]:
    """All lines in ONE write (pipelined), then each reply in order."""
    data = b"".join((x.encode("latin-1") if isinstance(x, str) else x) + b"\r\n"
                    for x, _ in pairs)
    return tx(conn, data, *[w for _, w in pairs])


def add(s: ScenarioList) -> None:
    s.add(
        "unknown-commands",
        lines(0, [("", "UNKNOWN_COMMAND"), ("STATS", "UNKNOWN_COMMAND"),
                  (" stats", "UNKNOWN_COMMAND"), ("foo", "UNKNOWN_COMMAND"),
                  ("put", "UNKNOWN_COMMAND"), ("peek", "UNKNOWN_COMMAND"),
                  ("delete", "UNKNOWN_COMMAND"), ("release", "UNKNOWN_COMMAND"),
                  ("bury", "UNKNOWN_COMMAND"), ("touch", "UNKNOWN_COMMAND"),
                  ("kick", "UNKNOWN_COMMAND"), ("kick-job", "UNKNOWN_COMMAND"),
                  ("use", "UNKNOWN_COMMAND"), ("watch", "UNKNOWN_COMMAND"),
                  ("ignore", "UNKNOWN_COMMAND"), ("Reserve", "UNKNOWN_COMMAND"),
                  ("list", "UNKNOWN_COMMAND"), ("pause", "UNKNOWN_COMMAND"),
                  ("qui", "UNKNOWN_COMMAND"), ("peek-", "UNKNOWN_COMMAND"),
                  ("\tstats", "UNKNOWN_COMMAND")]),
        cmd(0, "stats", {"cmd-stats": 1, "cmd-put": 0, "cmd-peek": 0}),
    )
    s.add(
        "prefix-matches-give-bad-format",
        lines(0, [("reserve-with-timeout", "BAD_FORMAT"), ("reserve-job", "BAD_FORMAT"),
                  ("reservex", "BAD_FORMAT"), ("reserve ", "BAD_FORMAT"),
                  ("stats-job", "BAD_FORMAT"), ("stats-tube", "BAD_FORMAT"),
                  ("statsx", "BAD_FORMAT"), ("stats ", "BAD_FORMAT"),
                  ("pause-tube", "BAD_FORMAT"), ("list-tubesx", "BAD_FORMAT"),
                  ("list-tubes ", "BAD_FORMAT"), ("peek-ready ", "BAD_FORMAT"),
                  ("peek-readyx", "BAD_FORMAT"), ("peek-delayed x", "BAD_FORMAT"),
                  ("peek-buried ", "BAD_FORMAT"), ("list-tube-used x", "BAD_FORMAT"),
                  ("list-tubes-watched ", "BAD_FORMAT"), ("list-tube", "UNKNOWN_COMMAND"),
                  ("list-tubes-watch", "BAD_FORMAT")]),
        cmd(0, "stats", {"cmd-reserve": 0, "cmd-stats": 1, "cmd-list-tubes": 0,
                         "cmd-peek-ready": 0}),
    )
    s.add(
        "space-but-no-argument",
        lines(0, [("put ", "BAD_FORMAT"), ("peek ", "BAD_FORMAT"),
                  ("reserve-with-timeout ", "TIMED_OUT"), ("reserve-job ", "BAD_FORMAT"),
                  ("delete ", "BAD_FORMAT"), ("release ", "BAD_FORMAT"),
                  ("bury ", "BAD_FORMAT"), ("kick ", "BAD_FORMAT"),
                  ("kick-job ", "BAD_FORMAT"), ("touch ", "BAD_FORMAT"),
                  ("stats-job ", "BAD_FORMAT"), ("stats-tube ", "BAD_FORMAT"),
                  ("use ", "BAD_FORMAT"), ("watch ", "BAD_FORMAT"),
                  ("ignore ", "BAD_FORMAT"), ("pause-tube ", "BAD_FORMAT"),
                  ("pause-tube x", "BAD_FORMAT"), ("pause-tube x ", "BAD_FORMAT")]),
    )
    s.add(
        "strict-job-id-numbers",
        put(0, "x", want="INSERTED #1"),
        lines(0, [("peek 5 ", "BAD_FORMAT"), ("peek 5x", "BAD_FORMAT"),
                  ("peek 1 2", "BAD_FORMAT"), ("peek -1", "BAD_FORMAT"),
                  ("peek +1", "BAD_FORMAT"), ("peek abc", "BAD_FORMAT"),
                  ("peek 0x1", "BAD_FORMAT"), ("peek 1.0", "BAD_FORMAT"),
                  ("peek \t1", "BAD_FORMAT"), ("peek    1", "FOUND #1 1"),
                  ("peek 0001", "FOUND #1 1"), ("peek 0", "NOT_FOUND"),
                  ("peek 18446744073709551615", "NOT_FOUND"),
                  ("peek 18446744073709551616", "BAD_FORMAT"),
                  ("peek 99999999999999999999999", "BAD_FORMAT"),
                  ("delete 1 ", "BAD_FORMAT"), ("touch 1x", "BAD_FORMAT"),
                  ("stats-job 1 1", "BAD_FORMAT"), ("kick-job -1", "BAD_FORMAT"),
                  ("reserve-job 1 ", "BAD_FORMAT"), ("stats-job 00001", None)]),
        cmd(0, "stats", {"cmd-peek": 4, "cmd-delete": 0, "cmd-stats-job": 1}),
    )
    s.add(
        "put-number-parsing",
        tx(0, "put  0  0  60  1\r\na\r\n", "INSERTED #1"),
        tx(0, "put 00 000 060 01\r\nb\r\n", "INSERTED #2"),
        tx(0, "put 4294967295 0 1 1\r\nc\r\n", "INSERTED #3"),
        tx(0, "put 4294967296 0 1 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 4294967296 1 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 4294967296 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 1 4294967296\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put -1 0 1 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 1 1 \r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 1 1 2\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 1.5 0 1 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0\t0 1 1\r\nd\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        cmd(0, "stats-job {j3}", {"pri": 4294967295, "ttr": 1}),
        cmd(0, "stats", {"cmd-put": 5, "total-jobs": 3}),
    )
    s.add(
        "put-bad-format-body-is-next-command",
        tx(0, "put 0 0 60 x\r\nlist-tube-used\r\n", "BAD_FORMAT", "USING default"),
        tx(0, "put 0 0 60 5 \r\nhello\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 60 14 junk\r\nuse from-body\r\n", "BAD_FORMAT", "USING from-body"),
        tx(0, "put 0 0 60\r\nput 0 0 60 2\r\nhi\r\n", "BAD_FORMAT", "INSERTED #1"),
        cmd(0, "stats-job {j1}", {"tube": "from-body"}),
    )
    s.add(
        "release-bury-argument-parsing",
        put(0, "x", want="INSERTED #1"),
        cmd(0, "reserve", "RESERVED #1 1"),
        lines(0, [("release {j1} 4294967296 0", "BAD_FORMAT"),
                  ("release {j1} 1", "BAD_FORMAT"), ("release {j1} 1 0 ", "BAD_FORMAT"),
                  ("release {j1} 1 x", "BAD_FORMAT"), ("release {j1} 1 -1", "BAD_FORMAT"),
                  ("release {j1}", "BAD_FORMAT"), ("bury {j1} x", "BAD_FORMAT"),
                  ("bury {j1}", "BAD_FORMAT"), ("bury {j1} 4294967296", "BAD_FORMAT"),
                  ("bury {j1} 1 1", "BAD_FORMAT"), ("release  {j1}  7  0", "RELEASED")]),
        cmd(0, "reserve", "RESERVED #1 1"),
        cmd(0, "bury  {j1}  4294967295", "BURIED"),
        cmd(0, "stats-job {j1}", {"pri": 4294967295, "releases": 1, "buries": 1}),
        cmd(0, "stats", {"cmd-release": 1, "cmd-bury": 1}),
    )
    s.add(
        "kick-leniency",
        [step for i in range(6) for step in put(0, f"j{i}", want=f"INSERTED #{i + 1}")],
        [step for i in range(6) for step in cmd(0, "reserve", f"RESERVED #{i + 1} 2")],
        [step for i in range(6) for step in cmd(0, f"bury {{j{i + 1}}} 0", "BURIED")],
        lines(0, [("kick abc", "BAD_FORMAT"), ("kick ", "BAD_FORMAT"),
                  ("kick 18446744073709551616", "BAD_FORMAT"),
                  ("kick 1 junk", "KICKED 1"), ("kick 4294967297", "KICKED 1"),
                  ("kick 1x", "KICKED 1"), ("kick  1", "KICKED 1"),
                  ("kick -1", "KICKED 2"), ("kick 18446744073709551615", "KICKED 0")]),
        cmd(0, "stats", {"cmd-kick": 6}),
    )
    s.add(
        "reserve-with-timeout-leniency",
        lines(0, [("reserve-with-timeout abc", "TIMED_OUT"),
                  ("reserve-with-timeout 0junk", "TIMED_OUT"),
                  ("reserve-with-timeout 0 1", "TIMED_OUT"),
                  ("reserve-with-timeout 4294967296", "TIMED_OUT"),
                  ("reserve-with-timeout 99999999999999999999", "BAD_FORMAT"),
                  ("reserve-with-timeout  0", "TIMED_OUT")]),
        put(1, "x", want="INSERTED #1"),
        cmd(0, "reserve-with-timeout x", "RESERVED #1 1"),
        cmd(0, "stats", {"cmd-reserve-with-timeout": 6, "current-waiting": 0}),
    )
    s.add(
        "tube-name-rules",
        lines(0, [("use " + "a" * 200, "USING " + "a" * 200),
                  ("use " + "a" * 201, "BAD_FORMAT"),
                  ("use AZaz09" + ALLOWED_SPECIALS, "USING AZaz09" + ALLOWED_SPECIALS),
                  ("use -x", "BAD_FORMAT"), ("use x-", "USING x-"),
                  ("use (x)", "USING (x)"), ("use $", "USING $"), ("use _", "USING _"),
                  ("use  foo", "BAD_FORMAT"), ("use foo ", "BAD_FORMAT"),
                  ("use foo bar", "BAD_FORMAT"), ("use Foo", "USING Foo"),
                  ("use foo", "USING foo")]),
        lines(0, [(b"use a" + bytes([c]) + b"b", "BAD_FORMAT") for c in BAD_NAME_BYTES]),
        cmd(0, "list-tubes", frozenset({"default", "foo"})),
        cmd(0, "stats", {"cmd-use": 8}),
    )
    s.add(
        "tube-name-rules-watch-ignore-stats-tube",
        lines(0, [("watch " + "b" * 200, "WATCHING 2"), ("watch " + "b" * 201, "BAD_FORMAT"),
                  ("watch -b", "BAD_FORMAT"), ("watch b ", "BAD_FORMAT"),
                  ("watch b@", "BAD_FORMAT"), ("ignore -b", "BAD_FORMAT"),
                  ("ignore b b", "BAD_FORMAT"), ("ignore " + "c" * 201, "BAD_FORMAT"),
                  ("stats-tube -b", "BAD_FORMAT"), ("stats-tube  default", "BAD_FORMAT"),
                  ("stats-tube default ", "BAD_FORMAT"),
                  ("stats-tube " + "b" * 201, "BAD_FORMAT"),
                  ("stats-tube " + "b" * 200, {"name": "b" * 200, "current-watching": 1}),
                  ("ignore " + "b" * 200, "WATCHING 1")]),
        lines(0, [(b"watch x" + bytes([c]), "BAD_FORMAT") for c in BAD_NAME_BYTES]),
        cmd(0, "stats", {"cmd-watch": 1, "cmd-ignore": 1, "cmd-stats-tube": 1}),
    )
    s.add(
        "pause-tube-parsing",
        cmd(0, "use p", "USING p"),
        lines(0, [("pause-tube p@ 1", "BAD_FORMAT"), ("pause-tube -p 1", "BAD_FORMAT"),
                  ("pause-tube p", "BAD_FORMAT"), ("pause-tube p 1 ", "BAD_FORMAT"),
                  ("pause-tube p x", "BAD_FORMAT"), ("pause-tube p -1", "BAD_FORMAT"),
                  ("pause-tube p 4294967296", "BAD_FORMAT"),
                  ("pause-tube " + "p" * 201 + " 1", "BAD_FORMAT"),
                  ("pause-tube   p   100", "PAUSED"), ("pause-tube nosuch 1", "NOT_FOUND"),
                  ("pause-tube p 4294967295", "PAUSED")]),
        cmd(0, "stats-tube p", {"pause": 4294967295, "cmd-pause-tube": 2}),
        cmd(0, "pause-tube p 0", "PAUSED"),
        cmd(0, "stats-tube p", {"pause": 0, "pause-time-left": "~0", "cmd-pause-tube": 3}),
        cmd(0, "stats", {"cmd-pause-tube": 6}),
    )
    s.add(
        "line-length-limit",
        # "put" plus padding spaces: accepted while the line (with \r\n) is <= 224 bytes.
        tx(0, "put" + " " * (224 - 2 - 11) + "0 0 60 1\r\na\r\n", "INSERTED #1"),
        tx(0, "delete" + " " * (224 - 2 - 7) + "9\r\n", "NOT_FOUND"),
        tx(0, "delete" + " " * (226 - 2 - 7) + "9\r\nlist-tube-used\r\n",
           "BAD_FORMAT", "USING default"),
        tx(0, "put" + " " * (230 - 2 - 11) + "0 0 60 1\r\na\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "x" * 10000 + "\r\nlist-tube-used\r\n", "BAD_FORMAT", "USING default"),
        tx(0, "use " + "y" * 5000 + "\r\nuse short\r\n", "BAD_FORMAT", "USING short"),
        cmd(0, "stats", {"cmd-put": 1, "cmd-delete": 1, "cmd-use": 1}),
    )
    s.add(
        "long-line-in-pieces",
        send(0, "z" * 150),
        send(0, "z" * 150),
        send(0, "z" * 150 + "\r"),
        send(0, "\nlist-tube-used\r\n"),
        recv(0, "BAD_FORMAT", "USING default"),
    )
    s.add(
        "nul-bytes-in-command-lines",
        lines(0, [(b"\x00", "BAD_FORMAT"), (b"stats\x00", "BAD_FORMAT"),
                  (b"use fo\x00o", "BAD_FORMAT"), (b"list-tube-used\x00", "BAD_FORMAT"),
                  (b"peek 1\x00", "BAD_FORMAT"), (b"\x00stats", "BAD_FORMAT"),
                  (b"quit\x00", "BAD_FORMAT"), (b"list-tube-used", "USING default")]),
        cmd(0, "stats", {"cmd-use": 0, "cmd-stats": 1}),
    )
    s.add(
        "lone-newline-is-not-a-line-end",
        lines(0, [(b"list-tube-used\nstats", "BAD_FORMAT"), (b"\nstats", "UNKNOWN_COMMAND"),
                  (b"stats\n", "BAD_FORMAT"), (b"use a\nb", "BAD_FORMAT"),
                  (b"list-tubes\n\n", "BAD_FORMAT"), (b"\n", "UNKNOWN_COMMAND")]),
        tx(0, "use x\n\r\n", "BAD_FORMAT"),
        cmd(0, "list-tube-used", "USING default"),
    )
    s.add(
        "job-too-big-swallows-body",
        tx(0, "put 0 0 60 11\r\n0123456789A\r\nlist-tube-used\r\n", "JOB_TOO_BIG",
           "USING default"),
        tx(0, "put 0 0 60 12\r\nuse x\r\nstats\r\nlist-tube-used\r\n", "JOB_TOO_BIG",
           "USING default"),
        tx(0, "put 0 0 60 11\r\n0123456789AXYlist-tube-used\r\n", "JOB_TOO_BIG",
           "USING default"),
        tx(0, "put 0 0 1 70000 junk\r\n" + "q" * 70000 + "\r\nlist-tube-used\r\n",
           "JOB_TOO_BIG", "USING default"),
        cmd(1, "stats", {"cmd-put": 4, "total-jobs": 0, "cmd-use": 0, "cmd-stats": 1}),
        max_job_size=10,
    )
    s.add(
        "expected-crlf",
        tx(0, "put 0 0 60 3\r\nabcde\r\n", "EXPECTED_CRLF", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 60 3\r\nabc\n\r\r\n", "EXPECTED_CRLF", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 60 3\r\nabc\r\r\nlist-tube-used\r\n", "EXPECTED_CRLF",
           "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 60 3\r\nabcdelist-tube-used\r\n", "EXPECTED_CRLF", "USING default"),
        tx(0, "put 0 0 60 0\r\nXY\r\n", "EXPECTED_CRLF", "UNKNOWN_COMMAND"),
        put(0, "after", want="INSERTED #1"),
        cmd(0, "peek 6", "FOUND #1 5"),
        cmd(0, "stats", {"cmd-put": 6, "total-jobs": 1, "current-jobs-ready": 1}),
    )
    s.add(
        "binary-bodies",
        put(0, b"\r\n", want="INSERTED #1"),
        put(0, b"\x00\x00\r\n\x00", want="INSERTED #2"),
        put(0, bytes(range(256)), want="INSERTED #3"),
        put(0, b"", want="INSERTED #4"),
        put(0, b"put 0 0 1 1\r\nx\r\nquit\r\n", want="INSERTED #5"),
        put(0, b"\r\n" * 100 + b"\r", want="INSERTED #6"),
        cmd(0, "peek {j3}", ("FOUND #3 256", bytes(range(256)))),
        cmd(0, "reserve", ("RESERVED #1 2", b"\r\n")),
        cmd(0, "reserve", ("RESERVED #2 5", b"\x00\x00\r\n\x00")),
        cmd(0, "reserve", ("RESERVED #3 256", bytes(range(256)))),
        cmd(0, "reserve", ("RESERVED #4 0", b"")),
        cmd(0, "reserve", ("RESERVED #5 22", b"put 0 0 1 1\r\nx\r\nquit\r\n")),
        cmd(0, "reserve", ("RESERVED #6 201", b"\r\n" * 100 + b"\r")),
        cmd(0, "stats", {"total-jobs": 6, "cmd-put": 6}),
    )
    s.add(
        "pipelined-many-commands-one-write",
        send(0, b"".join(b"put %d 0 60 4\r\nj%03d\r\n" % (i % 3, i) for i in range(50))
             + b"list-tube-used\r\n" + b"reserve\r\n" * 50 + b"stats-tube default\r\n"),
        recv(0, *[f"INSERTED #{i + 1}" for i in range(50)], "USING default",
             *[f"RESERVED #{i + 1} 4" for i in range(0, 50, 3)],
             *[f"RESERVED #{i + 1} 4" for i in range(1, 50, 3)],
             *[f"RESERVED #{i + 1} 4" for i in range(2, 50, 3)],
             {"current-jobs-reserved": 50, "total-jobs": 50}),
        send(0, "".join(f"delete {{j{i + 1}}}\r\n" for i in range(50)) + "stats\r\n"),
        recv(0, *["DELETED"] * 50, {"cmd-delete": 50, "current-jobs-reserved": 0}),
    )
    s.add(
        "commands-split-across-writes",
        [send(0, bytes([b])) for b in b"put 5 0 60 3\r\nabc\r\n"],
        recv(0, "INSERTED #1"),
        send(0, "pe"), send(0, "ek {j1}\r"), send(0, "\nlist-tube-"), send(0, "used\r\nput 0 0 1"),
        send(0, " 4\r\nab"), send(0, "\r\n"), send(0, "\r\n"),
        recv(0, ("FOUND #1 3", b"abc"), "USING default", "INSERTED #2"),
        cmd(0, "peek {j2}", ("FOUND #2 4", b"ab\r\n")),
    )
    s.add(
        "quit-matched-by-prefix-quirk",
        send(1, "quitx\r\n"),
        eof(1),
        send(2, "quit-now please\r\n"),
        eof(2),
        cmd(0, "stats", {"current-connections": 2, "total-connections": 4}),
    )
    s.add(
        "pause-tube-without-space-quirk",
        cmd(0, "use p", "USING p"),
        cmd(0, "pause-tubep 100", "PAUSED"),
        cmd(0, "stats-tube p", {"pause": 100}),
    )
    s.add(
        "line-of-225-bytes-quirk",
        tx(0, "delete" + " " * (225 - 2 - 7) + "9\r\nlist-tube-used\r\nlist-tube-used\r\n",
           "BAD_FORMAT", "USING default"),
        silent(0, 0.2),
    )
    s.add(
        "bare-cr-stalls-line-quirk",
        send(0, "list-tube-used\rx\r\nlist-tube-used\r\n"),
        silent(0, 0.2),
        send(0, "y" * 250 + "\r\nlist-tube-used\r\n"),
        recv(0, "BAD_FORMAT", "USING default"),
        silent(0, 0.2),
    )
    s.add(
        "quit-pipelined-after-put",
        tx(0, "put 0 0 1 1\r\nq\r\nquit\r\nput 0 0 1 1\r\nr\r\n", "INSERTED #1"),
        eof(0),
        cmd(1, "stats", {"total-jobs": 1, "current-jobs-ready": 1}),
    )
