"""Scenarios: stats, stats-job and stats-tube fields and counters; job size limits."""

from __future__ import annotations

from tests.server.difftools.steps import (
    ScenarioList,
    await_stats,
    close,
    cmd,
    put,
    recv,
    send,
    tx,
)


def add(s: ScenarioList) -> None:
    s.add(
        "stats-job-fields",
        cmd(0, "use jobs", "USING jobs"),
        tx(0, "put 1023 0 0 3\r\nabc\r\n", "INSERTED #1"),
        send(0, "stats-job {j1}\r\n"),
        recv(0, {"id": "#1", "tube": "jobs", "state": "ready", "pri": 1023, "age": "~0",
                 "delay": 0, "ttr": 1, "time-left": "~0", "file": 0, "reserves": 0,
                 "timeouts": 0, "releases": 0, "buries": 0, "kicks": 0}),
        put(0, "x", delay=30, ttr=20, want="INSERTED #2"),
        cmd(0, "stats-job {j2}", {"state": "delayed", "delay": 30, "ttr": 20, "time-left": "~29"}),
        cmd(0, "stats-job 999", "NOT_FOUND"),
    )
    s.add(
        "stats-tube-fields",
        cmd(0, "stats-tube default", {"name": "default", "current-jobs-urgent": 0,
                                       "current-using": 2, "current-watching": 2,
                                       "current-waiting": 0, "pause": 0, "total-jobs": 0}),
        cmd(0, "stats-tube nosuch", "NOT_FOUND"),
        cmd(0, "use t", "USING t"),
        put(0, "u", pri=1023, want="INSERTED #1"),
        put(0, "n", pri=1024, want="INSERTED #2"),
        put(0, "d", delay=100, want="INSERTED #3"),
        cmd(0, "reserve-job {j2}", "RESERVED #2 1"),
        cmd(0, "stats-tube t", {"current-jobs-urgent": 1, "current-jobs-ready": 1,
                                 "current-jobs-reserved": 1, "current-jobs-delayed": 1,
                                 "current-jobs-buried": 0, "total-jobs": 3,
                                 "current-using": 1, "current-watching": 0}),
        cmd(0, "stats", {"current-jobs-urgent": 1, "total-jobs": 3, "current-tubes": 2}),
    )
    s.add(
        "urgent-boundary",
        put(0, "a", pri=0, want="INSERTED #1"),
        put(0, "b", pri=1023, want="INSERTED #2"),
        put(0, "c", pri=1024, want="INSERTED #3"),
        cmd(0, "stats", {"current-jobs-urgent": 2, "current-jobs-ready": 3}),
        cmd(0, "reserve", "RESERVED #1 1"),
        cmd(0, "stats", {"current-jobs-urgent": 1, "current-jobs-reserved": 1}),
        cmd(0, "release {j1} 2000 0", "RELEASED"),
        cmd(0, "stats-tube default", {"current-jobs-urgent": 1}),
    )
    s.add(
        "current-connection-counters",
        cmd(0, "stats", {"current-connections": 2, "total-connections": 2,
                         "current-producers": 0, "current-workers": 0}),
        put(1, "p", want="INSERTED #1"),
        cmd(2, "reserve-with-timeout 0", "RESERVED #1 1"),
        cmd(3, "reserve-job 999", "NOT_FOUND"),
        cmd(0, "stats", {"current-connections": 5, "total-connections": 5,
                         "current-producers": 1, "current-workers": 1,
                         "current-jobs-reserved": 1}),
        close(1),
        close(2),
        cmd(0, "stats", {"current-connections": 3, "total-connections": 5,
                         "current-producers": 0, "current-workers": 0,
                         "current-jobs-ready": 1, "current-jobs-reserved": 0}),
    )
    s.add(
        "ttr-zero-becomes-one",
        tx(0, "put 0 0 0 1\r\nz\r\n", "INSERTED #1"),
        cmd(0, "stats-job {j1}", {"ttr": 1}),
        tx(0, "put 0 0 4294967295 1\r\nz\r\n", "INSERTED #2"),
        cmd(0, "stats-job {j2}", {"ttr": 4294967295}),
    )
    s.add(
        "max-job-size-boundary",
        tx(0, "put 0 0 1 10\r\n0123456789\r\n", "INSERTED #1"),
        tx(0, "put 0 0 1 11\r\n0123456789A\r\n", "JOB_TOO_BIG"),
        cmd(0, "list-tube-used", "USING default"),
        cmd(0, "stats", {"max-job-size": 10, "cmd-put": 2, "total-jobs": 1}),
        max_job_size=10,
    )
    s.add(
        "default-max-job-size",
        tx(0, b"put 0 0 1 65535\r\n" + b"\xab" * 65535 + b"\r\n", "INSERTED #1"),
        tx(0, b"put 0 0 1 65536\r\n" + b"\xab" * 65536 + b"\r\n", "JOB_TOO_BIG"),
        cmd(0, "peek {j1}", ("FOUND #1 65535", b"\xab" * 65535)),
        cmd(0, "stats", {"max-job-size": 65535}),
    )
    s.add(
        "stats-counters-count-parsed-commands",
        cmd(0, "delete 999", "NOT_FOUND"),
        cmd(0, "delete x", "BAD_FORMAT"),
        cmd(0, "peek 1", "NOT_FOUND"),
        cmd(0, "pause-tube -x 1", "BAD_FORMAT"),
        cmd(0, "pause-tube nosuch 1", "NOT_FOUND"),
        cmd(0, "reserve-job 5", "NOT_FOUND"),
        cmd(0, "kick-job 5", "NOT_FOUND"),
        cmd(0, "stats-job 5", "NOT_FOUND"),
        cmd(0, "stats-tube nosuch", "NOT_FOUND"),
        cmd(0, "use default", "USING default"),
        cmd(0, "watch default", "WATCHING 1"),
        cmd(0, "ignore default", "NOT_IGNORED"),
        cmd(0, "list-tubes", frozenset({"default"})),
        cmd(0, "list-tube-used", "USING default"),
        cmd(0, "list-tubes-watched", frozenset({"default"})),
        cmd(0, "stats", {"cmd-delete": 1, "cmd-peek": 1, "cmd-pause-tube": 2,
                         "cmd-stats-job": 1, "cmd-stats-tube": 1, "cmd-use": 1,
                         "cmd-watch": 1, "cmd-ignore": 1, "cmd-list-tubes": 1,
                         "cmd-list-tube-used": 1, "cmd-list-tubes-watched": 1,
                         "cmd-stats": 1, "cmd-kick": 0, "cmd-reserve": 0}),
    )
    s.add(
        "put-counted-even-when-rejected",
        tx(0, "put 0 0 1 11\r\n0123456789A\r\n", "JOB_TOO_BIG"),
        tx(0, "put 0 0 1 3\r\nabcde\r\n", "EXPECTED_CRLF", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 1 1 x\r\nz\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        tx(0, "put 0 0 x 1\r\nz\r\n", "BAD_FORMAT", "UNKNOWN_COMMAND"),
        cmd(0, "stats", {"cmd-put": 3, "total-jobs": 0, "current-producers": 1}),
        max_job_size=10,
    )
    s.add(
        "put-counted-at-its-line-while-its-body-is-on-its-way",
        send(0, "put 0 0 60 5\r\nab"),
        await_stats(cmd_put=1, current_producers=1, total_jobs=0),
        cmd(1, "stats", {"cmd-put": 1, "current-producers": 1, "total-jobs": 0}),
        tx(0, "cde\r\n", "INSERTED #1"),
        tx(0, "put 0 0 60 2\r\nfg\r\n", "INSERTED #2"),
        cmd(1, "stats", {"cmd-put": 2, "current-producers": 1, "total-jobs": 2}),
    )
    s.add(
        "ids-consumed-by-expected-crlf",
        tx(0, "put 0 0 1 3\r\nabcde\r\n", "EXPECTED_CRLF", "UNKNOWN_COMMAND"),
        put(0, "ok", want="INSERTED #1"),
        cmd(0, "peek 1", "NOT_FOUND"),
        cmd(0, "peek 2", "FOUND #1 2"),
        cmd(0, "stats", {"total-jobs": 1}),
    )
    s.add(
        "stats-global-after-mixed-work",
        cmd(0, "use a", "USING a"),
        put(0, "1", want="INSERTED #1"),
        put(0, "2", delay=100, want="INSERTED #2"),
        put(0, "3", want="INSERTED #3"),
        cmd(1, "watch a", "WATCHING 2"),
        cmd(1, "reserve", "RESERVED #1 1"),
        cmd(1, "reserve", "RESERVED #3 1"),
        cmd(1, "bury {j3} 0", "BURIED"),
        send(2, "stats\r\n"),
        recv(2, {"current-jobs-urgent": 0, "current-jobs-ready": 0,
                 "current-jobs-reserved": 1, "current-jobs-delayed": 1,
                 "current-jobs-buried": 1, "cmd-put": 3, "cmd-reserve": 2, "cmd-bury": 1,
                 "cmd-use": 1, "cmd-watch": 1, "total-jobs": 3, "current-tubes": 2,
                 "current-connections": 4, "current-producers": 1, "current-workers": 1,
                 "current-waiting": 0, "job-timeouts": 0, "draining": "false",
                 "binlog-oldest-index": 0, "binlog-current-index": 0,
                 "binlog-records-migrated": 0, "binlog-records-written": 0,
                 "binlog-max-size": 10485760}),
    )
