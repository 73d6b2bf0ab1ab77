"""Scenarios: several connections, blocking reserves, TTR, DEADLINE_SOON, delays, pauses.

Timing rules (the real binary runs on a loaded 2-core machine): protocol times are 1-2 s;
silence is only asserted for windows well inside a protocol time; replies are awaited with
generous deadlines; nothing asserts that a reply came *after* a sub-second instant. Before
observing a TTR expiry the owner sends a command (a hidden ``stats-job`` poll), because
1.12 sometimes loses the expiry timer until the owner speaks (protocol reference §5.3).
"""

from __future__ import annotations

from tests.server.difftools.steps import (
    ScenarioList,
    await_stats,
    close,
    cmd,
    drain,
    eof,
    half_close,
    mark,
    poll,
    put,
    recv,
    send,
    silent,
    silent_since_mark,
    tx,
)


def add(s: ScenarioList) -> None:
    s.add(
        "blocked-reserve-gets-later-put",
        send(1, "reserve\r\n"),
        silent(1),
        await_stats(current_waiting=1),
        cmd(0, "stats-tube default", {"current-waiting": 1}),
        put(0, "late", want="INSERTED #1"),
        recv(1, ("RESERVED #1 4", b"late")),
        cmd(0, "stats", {"current-waiting": 0, "current-jobs-reserved": 1, "cmd-reserve": 1}),
    )
    s.add(
        "pipelined-commands-wait-behind-blocked-reserve",
        send(1, "reserve\r\nlist-tube-used\r\nuse after\r\nput 0 0 1 2\r\nhi\r\n"),
        silent(1),
        await_stats(current_waiting=1),
        cmd(0, "stats", {"cmd-list-tube-used": 0, "cmd-use": 0, "cmd-put": 0}),
        put(0, "wake", want="INSERTED #1"),
        recv(1, "RESERVED #1 4", "USING default", "USING after", "INSERTED #2"),
    )
    s.add(
        "three-waiters-served-in-arrival-order",
        send(1, "reserve\r\n"),
        await_stats(current_waiting=1),
        send(2, "reserve\r\n"),
        await_stats(current_waiting=2),
        send(3, "reserve\r\n"),
        await_stats(current_waiting=3),
        tx(0, "put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nput 0 0 60 1\r\nc\r\n",
           "INSERTED #1", "INSERTED #2", "INSERTED #3"),
        recv(1, ("RESERVED #1 1", b"a")),
        recv(2, ("RESERVED #2 1", b"b")),
        recv(3, ("RESERVED #3 1", b"c")),
    )
    s.add(
        "two-waiters-one-job-each",
        send(1, "reserve\r\n"),
        await_stats(current_waiting=1),
        send(2, "reserve\r\n"),
        await_stats(current_waiting=2),
        put(0, "one", want="INSERTED #1"),
        recv(1, "RESERVED #1 3"),
        silent(2, 0.2),
        cmd(0, "stats", {"current-waiting": 1}),
        put(0, "two", want="INSERTED #2"),
        recv(2, "RESERVED #2 3"),
    )
    s.add(
        "waiter-on-several-tubes",
        tx(1, "watch a\r\nwatch b\r\nignore default\r\nreserve\r\n",
           "WATCHING 2", "WATCHING 3", "WATCHING 2"),
        await_stats(current_waiting=1),
        cmd(0, "stats-tube a", {"current-waiting": 1, "current-watching": 1}),
        cmd(0, "stats-tube b", {"current-waiting": 1}),
        cmd(0, "stats-tube default", {"current-waiting": 0}),
        put(0, "not-for-1", want="INSERTED #1"),
        silent(1, 0.2),
        cmd(0, "use b", "USING b"),
        put(0, "for-1", want="INSERTED #2"),
        recv(1, ("RESERVED #2 5", b"for-1")),
    )
    s.add(
        "release-kick-wake-waiters-bury-does-not",
        put(0, "j", want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        send(2, "reserve\r\n"),
        await_stats(current_waiting=1),
        cmd(1, "bury {j1} 0", "BURIED"),
        silent(2, 0.2),
        cmd(1, "kick 1", "KICKED 1"),
        recv(2, "RESERVED #1 1"),
        send(1, "reserve\r\n"),
        await_stats(current_waiting=1),
        cmd(2, "release {j1} 0 0", "RELEASED"),
        recv(1, "RESERVED #1 1"),
        cmd(1, "stats-job {j1}", {"reserves": 3, "releases": 1, "buries": 1, "kicks": 1}),
    )
    s.add(
        "owner-disconnect-hands-job-to-waiter",
        put(0, "j", want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        send(2, "reserve\r\n"),
        await_stats(current_waiting=1),
        close(1),
        recv(2, "RESERVED #1 1"),
        cmd(2, "stats-job {j1}", {"reserves": 2, "timeouts": 0, "releases": 0}),
    )
    s.add(
        "quit-hands-job-to-waiter",
        put(0, "j", want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        send(2, "reserve\r\n"),
        await_stats(current_waiting=1),
        send(1, "quit\r\n"),
        eof(1),
        recv(2, "RESERVED #1 1"),
    )
    s.add(
        "half-close-while-waiting",
        send(1, "reserve\r\n"),
        await_stats(current_waiting=1),
        half_close(1),
        recv(1, "TIMED_OUT"),
        eof(1),
        cmd(0, "stats", {"current-waiting": 0, "current-connections": 2}),
    )
    s.add(
        "half-close-when-idle",
        put(1, "j", want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        half_close(1),
        eof(1),
        cmd(0, "stats-job {j1}", {"state": "ready"}),
    )
    s.add(
        "reserve-with-timeout-expires",
        send(1, "reserve-with-timeout 1\r\n"),
        mark(),
        silent_since_mark(1),
        recv(1, "TIMED_OUT"),
        put(0, "after", want="INSERTED #1"),
        silent(1, 0.2),
        cmd(0, "peek-ready", "FOUND #1 5"),
        cmd(0, "stats", {"current-waiting": 0, "cmd-reserve-with-timeout": 1}),
        slow=True,
    )
    s.add(
        "reserve-with-timeout-gets-job-in-time",
        send(1, "reserve-with-timeout 30\r\n"),
        await_stats(current_waiting=1),
        put(0, "soon", want="INSERTED #1"),
        recv(1, "RESERVED #1 4"),
    )
    s.add(
        "negative-timeout-waits-like-reserve",
        send(1, "reserve-with-timeout -1\r\n"),
        silent(1, 0.3),
        await_stats(current_waiting=1),
        put(0, "x", want="INSERTED #1"),
        recv(1, "RESERVED #1 1"),
    )
    s.add(
        "ttr-expiry-releases-job",
        put(0, "t", ttr=1, want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        poll(1, "stats-job {j1}", {"timeouts": "1"}),
        cmd(1, "stats-job {j1}", {"state": "ready", "timeouts": 1, "reserves": 1}),
        cmd(1, "touch {j1}", "NOT_FOUND"),
        cmd(1, "release {j1} 0 0", "NOT_FOUND"),
        cmd(1, "bury {j1} 0", "NOT_FOUND"),
        cmd(0, "stats", {"job-timeouts": 1, "current-jobs-ready": 1,
                         "current-jobs-reserved": 0}),
        cmd(1, "delete {j1}", "DELETED"),
        slow=True,
    )
    s.add(
        "ttr-expiry-hands-job-to-waiter",
        # TTR 2, so that the waiter surely still holds the job when it is inspected.
        put(0, "t", ttr=2, want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        send(2, "reserve\r\n"),
        await_stats(current_waiting=1),
        poll(1, "stats-job {j1}", {"timeouts": "1"}),
        recv(2, "RESERVED #1 1"),
        cmd(2, "stats-job {j1}", {"state": "reserved", "reserves": 2, "timeouts": 1}),
        cmd(1, "delete {j1}", "NOT_FOUND"),
        cmd(2, "delete {j1}", "DELETED"),
        slow=True,
    )
    s.add(
        "deadline-soon-at-once-inside-margin",
        # pri 5 vs 0: even if a loaded machine lets the TTR run out, "other" comes first.
        put(0, "short", pri=5, ttr=1, want="INSERTED #1"),
        tx(1, "reserve\r\nreserve\r\nreserve-with-timeout 5\r\n",
           "RESERVED #1 5", "DEADLINE_SOON", "DEADLINE_SOON"),
        put(0, "other", want="INSERTED #2"),
        tx(1, "reserve-with-timeout 0\r\n", "RESERVED #2 5"),
        cmd(1, "delete {j1}", "DELETED"),
        cmd(1, "delete {j2}", "DELETED"),
    )
    s.add(
        "deadline-soon-for-blocked-reserve",
        put(0, "ttr2", ttr=2, want="INSERTED #1"),
        send(1, "reserve\r\nreserve\r\n"),
        mark(),
        recv(1, "RESERVED #1 4"),
        silent_since_mark(1),
        recv(1, "DEADLINE_SOON"),
        cmd(1, "delete {j1}", "DELETED"),
        slow=True,
    )
    s.add(
        "deadline-soon-beats-timed-out",
        put(0, "ttr2", ttr=2, want="INSERTED #1"),
        tx(1, "reserve\r\nreserve-with-timeout 1\r\n", "RESERVED #1 4"),
        recv(1, "DEADLINE_SOON"),
        cmd(1, "delete {j1}", "DELETED"),
        slow=True,
    )
    s.add(
        "reserve-job-ignores-deadline-margin",
        put(0, "a", ttr=1, want="INSERTED #1"),
        put(0, "b", want="INSERTED #2"),
        cmd(0, "use elsewhere", "USING elsewhere"),
        put(0, "c", want="INSERTED #3"),
        tx(1, "reserve-job {j1}\r\nreserve-job {j3}\r\n", "RESERVED #1 1", "RESERVED #3 1"),
        cmd(1, "delete {j1}", None),
        cmd(1, "stats-job {j3}", {"state": "reserved", "tube": "elsewhere"}),
    )
    s.add(
        "touch-keeps-reservation",
        put(0, "t", ttr=3, want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 1"),
        cmd(1, "touch {j1}", "TOUCHED"),
        cmd(1, "stats-job {j1}", {"state": "reserved", "time-left": "~2", "timeouts": 0}),
        cmd(1, "delete {j1}", "DELETED"),
    )
    s.add(
        "delayed-job-becomes-ready",
        send(0, "put 0 1 60 5\r\nlater\r\npeek-delayed\r\nstats-job 1\r\n"),
        mark(),
        recv(0, "INSERTED #1", "FOUND #1 5",
             {"state": "delayed", "delay": 1, "time-left": "~0"}),
        send(1, "reserve\r\n"),
        silent_since_mark(1),
        recv(1, ("RESERVED #1 5", b"later")),
        cmd(1, "stats-job {j1}", {"state": "reserved", "delay": 1, "reserves": 1}),
        slow=True,
    )
    s.add(
        "release-with-delay-comes-back",
        put(0, "again", want="INSERTED #1"),
        cmd(1, "reserve", "RESERVED #1 5"),
        cmd(1, "release {j1} 3 1", "RELEASED"),
        cmd(1, "reserve", "RESERVED #1 5"),
        cmd(1, "stats-job {j1}", {"pri": 3, "delay": 1, "releases": 1, "reserves": 2}),
        slow=True,
    )
    s.add(
        "delayed-ordering-and-kick",
        put(0, "d3", delay=300, want="INSERTED #1"),
        put(0, "d1", delay=100, want="INSERTED #2"),
        put(0, "d2", delay=200, want="INSERTED #3"),
        cmd(0, "peek-delayed", "FOUND #2 2"),
        cmd(0, "kick 2", "KICKED 2"),
        cmd(0, "peek-delayed", "FOUND #1 2"),
        cmd(0, "reserve-with-timeout 0", "RESERVED #2 2"),
        cmd(0, "reserve-with-timeout 0", "RESERVED #3 2"),
    )
    s.add(
        "buried-list-is-fifo-by-bury-time",
        put(0, "a", want="INSERTED #1"),
        put(0, "b", want="INSERTED #2"),
        put(0, "c", want="INSERTED #3"),
        tx(0, "reserve\r\nreserve\r\nreserve\r\n", "RESERVED #1 1", "RESERVED #2 1",
           "RESERVED #3 1"),
        tx(0, "bury {j3} 0\r\nbury {j1} 0\r\nbury {j2} 0\r\n", "BURIED", "BURIED", "BURIED"),
        cmd(0, "peek-buried", "FOUND #3 1"),
        cmd(0, "kick 1", "KICKED 1"),
        cmd(0, "peek-buried", "FOUND #1 1"),
        cmd(0, "kick-job {j2}", "KICKED"),
        cmd(0, "peek-buried", "FOUND #1 1"),
    )
    s.add(
        "pause-tube-holds-waiter-until-it-ends",
        cmd(0, "use p", "USING p"),
        put(0, "paused", want="INSERTED #1"),
        send(0, "pause-tube p 1\r\n"),
        mark(),
        recv(0, "PAUSED"),
        tx(1, "watch p\r\nreserve\r\n", "WATCHING 2"),
        silent_since_mark(1),
        recv(1, "RESERVED #1 6"),
        cmd(0, "stats-tube p", {"pause": 0, "pause-time-left": 0, "cmd-pause-tube": 1}),
        slow=True,
    )
    s.add(
        "pause-tube-other-tube-still-served",
        cmd(0, "use p", "USING p"),
        put(0, "urgent-paused", pri=0, want="INSERTED #1"),
        cmd(0, "use q", "USING q"),
        put(0, "lazy-open", pri=100, want="INSERTED #2"),
        cmd(0, "pause-tube p 1000", "PAUSED"),
        tx(1, "watch p\r\nwatch q\r\nreserve\r\n", "WATCHING 2", "WATCHING 3", "RESERVED #2 9"),
        cmd(1, "reserve-with-timeout 0", "TIMED_OUT"),
        cmd(1, "peek {j1}", "FOUND #1 13"),
        cmd(0, "use p", "USING p"),
        cmd(0, "peek-ready", "FOUND #1 13"),
        cmd(1, "reserve-job {j1}", "RESERVED #1 13"),
        cmd(1, "release {j1} 0 0", "RELEASED"),
        cmd(0, "stats-tube p", {"pause": 1000, "pause-time-left": "~999",
                                 "current-jobs-ready": 1}),
    )
    s.add(
        "unpause-serves-waiter-at-once",
        cmd(0, "use p", "USING p"),
        put(0, "j", want="INSERTED #1"),
        cmd(0, "pause-tube p 1000", "PAUSED"),
        tx(1, "watch p\r\nreserve\r\n", "WATCHING 2"),
        await_stats(current_waiting=1),
        silent(1, 0.2),
        cmd(0, "pause-tube p 0", "PAUSED"),
        recv(1, "RESERVED #1 1"),
        cmd(0, "stats-tube p", {"pause": 0, "pause-time-left": "~0", "cmd-pause-tube": 2}),
    )
    s.add(
        "drain-mode",
        put(0, "before", want="INSERTED #1"),
        drain(),
        put(0, "during", want="DRAINING"),
        tx(0, "put 0 0 1 11\r\n0123456789A\r\n", "JOB_TOO_BIG"),
        tx(0, "put 0 0 1 3\r\nabcde\r\n", "EXPECTED_CRLF", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 x 1\r\nz\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        cmd(1, "reserve", "RESERVED #1 6"),
        cmd(1, "delete {j1}", "DELETED"),
        cmd(1, "stats", {"draining": "true", "cmd-put": 4, "total-jobs": 1,
                         "current-producers": 1}),
        cmd(1, "use other", "USING other"),
        put(1, "x", want="DRAINING"),
        max_job_size=10,
    )
    s.add(
        "tube-counters-follow-connections",
        tx(1, "use a\r\nwatch a\r\n", "USING a", "WATCHING 2"),
        cmd(2, "watch a", "WATCHING 2"),
        cmd(0, "stats-tube a", {"current-using": 1, "current-watching": 2}),
        cmd(0, "stats-tube default", {"current-using": 3, "current-watching": 4}),
        close(1),
        cmd(0, "stats-tube a", {"current-using": 0, "current-watching": 1}),
        close(2),
        cmd(0, "stats-tube a", "NOT_FOUND"),
        cmd(0, "stats", {"current-tubes": 1, "current-connections": 2}),
    )
    s.add(
        "waiting-connection-is-a-worker",
        send(1, "reserve\r\n"),
        await_stats(current_waiting=1),
        cmd(0, "stats", {"current-workers": 1, "current-waiting": 1, "cmd-reserve": 1}),
        cmd(0, "stats-tube default", {"current-waiting": 1}),
        put(0, "w", want="INSERTED #1"),
        recv(1, "RESERVED #1 1"),
        cmd(0, "stats", {"current-workers": 1, "current-waiting": 0}),
        cmd(0, "stats-tube default", {"current-waiting": 0}),
    )
    s.add(
        "half-close-after-pipelined-commands",
        send(1, "put 0 0 60 2\r\nhi\r\nlist-tube-used\r\nreserve\r\n"),
        half_close(1),
        recv(1, "INSERTED #1", "USING default", "RESERVED #1 2"),
        eof(1),
        cmd(0, "stats-job {j1}", {"state": "ready", "reserves": 1}),
    )
    s.add(
        "kick-and-delete-in-paused-tube",
        cmd(0, "use p", "USING p"),
        put(0, "d", delay=1000, want="INSERTED #1"),
        put(0, "r", want="INSERTED #2"),
        cmd(0, "pause-tube p 1000", "PAUSED"),
        cmd(0, "kick 5", "KICKED 1"),
        tx(1, "watch p\r\nignore default\r\nreserve-with-timeout 0\r\n",
           "WATCHING 2", "WATCHING 1", "TIMED_OUT"),
        cmd(1, "delete {j1}", "DELETED"),
        cmd(0, "stats-tube p", {"current-jobs-ready": 1, "cmd-delete": 1, "pause": 1000}),
    )
