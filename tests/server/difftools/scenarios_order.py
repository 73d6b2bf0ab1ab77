"""Scenarios: what happens first, found by fuzzing against 1.12 (issue #27 item 8).

* A job's id is taken at its ``put`` line, before its body: a put whose body comes after
  another connection's whole put gets the smaller id (and, at equal priority, is reserved
  first); a connection that closes in the middle of a body has used an id up.
* A pause ends when its time has come, also within one pipelined read (``pause-tube T 0``
  is a 1 ns pause in 1.12: the next ``reserve`` already sees the tube unpaused).
* ``reserve-with-timeout 0`` answers ``DEADLINE_SOON`` rather than ``TIMED_OUT`` when a
  reservation is in its safety margin, even if a ready job sits in a paused tube.

Job ids are compared literally here (``peek 1``): the transcripts number ids by order of
appearance, which would hide a swap. Where the bundled server differs on purpose: 1.12
files the job at its put line, so that while its body is on its way ``peek <id>`` finds it
and answers with whatever its body buffer holds, and ``stats-job`` shows it ``invalid``;
the bundled server knows no job until its body is in (``NOT_FOUND``).
"""

from __future__ import annotations

from tests.server.difftools.steps import ScenarioList, await_stats, close, cmd, put, send, tx


def add(s: ScenarioList) -> None:
    _ids(s)
    _pauses(s)


def _ids(s: ScenarioList) -> None:
    s.add(
        "put-takes-its-id-at-the-line",
        send(0, "put 0 0 100 1\r\n"),
        await_stats(cmd_put=1),
        put(1, "B", want="INSERTED #1"),
        tx(0, "A\r\n", "INSERTED #2"),
        cmd(2, "peek 1", ("FOUND #2 1", b"A")),
        cmd(2, "peek 2", ("FOUND #1 1", b"B")),
        # Equal priorities: the smaller id, the put that began first, is reserved first.
        cmd(2, "reserve-with-timeout 0", ("RESERVED #2 1", b"A")),
        cmd(2, "reserve-with-timeout 0", ("RESERVED #1 1", b"B")),
    )
    s.add(
        "put-body-in-pieces-around-other-puts",
        send(0, "use t\r\nput 5 0 100 6\r\nab"),
        await_stats(cmd_put=1),
        cmd(1, "use t", "USING t"),
        put(1, "x", pri=5, want="INSERTED #1"),
        send(0, "cd"),
        put(1, "y", pri=5, want="INSERTED #2"),
        tx(0, "ef\r\n", "USING t", "INSERTED #3"),
        cmd(1, "peek-ready", ("FOUND #3 6", b"abcdef")),
        cmd(1, "stats-job {j3}", {"id": "#3", "tube": "t", "pri": 5}),
        cmd(1, "peek 3", ("FOUND #2 1", b"y")),
    )
    s.add(
        "put-id-used-up-by-a-connection-closed-mid-body",
        send(0, "put 0 0 100 5\r\nAB"),
        await_stats(cmd_put=1),
        close(0),
        put(1, "x", want="INSERTED #1"),
        cmd(1, "peek 1", "NOT_FOUND"),
        cmd(1, "peek 2", ("FOUND #1 1", b"x")),
        cmd(1, "stats", {"total-jobs": 1, "current-jobs-ready": 1, "cmd-put": 2}),
    )
    s.add(
        "put-id-used-up-by-a-bad-body-after-other-puts",
        send(0, "put 0 0 100 1\r\n"),
        await_stats(cmd_put=1),
        put(1, "x", want="INSERTED #1"),
        tx(0, "ABC", "EXPECTED_CRLF"),
        put(1, "y", want="INSERTED #2"),
        cmd(1, "peek 2", ("FOUND #1 1", b"x")),
        cmd(1, "peek 3", ("FOUND #2 1", b"y")),
    )


def _pauses(s: ScenarioList) -> None:
    s.add(
        "pause-zero-ends-within-a-pipeline",
        tx(0, "put 0 0 100 1\r\nA\r\npause-tube default 0\r\nreserve-with-timeout 0\r\n",
           "INSERTED #1", "PAUSED", ("RESERVED #1 1", b"A")),
        cmd(0, "stats-tube default", {"pause": 0, "pause-time-left": 0, "cmd-pause-tube": 1,
                                      "current-jobs-reserved": 1}),
    )
    s.add(
        "pause-zero-after-a-long-pause-within-a-pipeline",
        cmd(0, "use p", "USING p"),
        put(0, "A", want="INSERTED #1"),
        tx(1, "watch p\r\npause-tube p 1000\r\nreserve-with-timeout 0\r\npause-tube p 0\r\n"
              "reserve-with-timeout 0\r\n",
           "WATCHING 2", "PAUSED", "TIMED_OUT", "PAUSED", ("RESERVED #1 1", b"A")),
    )
    s.add(
        "deadline-soon-beats-timed-out-beside-a-paused-ready-job",
        put(0, "A", ttr=1, want="INSERTED #1"),
        cmd(0, "reserve-with-timeout 0", ("RESERVED #1 1", b"A")),
        cmd(0, "pause-tube default 5", "PAUSED"),
        put(0, "B", want="INSERTED #2"),
        cmd(0, "reserve-with-timeout 0", "DEADLINE_SOON"),
    )
    s.add(
        "deadline-soon-beats-timed-out-beside-a-paused-ready-job-pipelined",
        tx(0, "put 0 0 1 1\r\nA\r\nreserve-with-timeout 0\r\npause-tube default 5\r\n"
              "put 0 0 100 1\r\nB\r\nreserve-with-timeout 0\r\nlist-tube-used\r\n",
           "INSERTED #1", ("RESERVED #1 1", b"A"), "PAUSED", "INSERTED #2", "DEADLINE_SOON",
           "USING default"),
    )
