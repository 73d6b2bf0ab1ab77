"""The beanstalkd commands ``cmdstalk-ctl`` sends, over a bounded ``Wire``.

Each method sends one command and parses its reply with ``replies``: results are plain
values, a missing job or tube raises ``NotFound``, anything else a server may do wrong
raises ``ServerFault``. Stats replies are checked for the numbers the commands compute
with, so no command meets a garbled field later.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmdstalk_py.client.names import tube_bytes
from cmdstalk_py.ctl.replies import (
    ServerFault,
    parse_number,
    parse_reply,
    parse_stats,
    parse_tube_list,
    require_numbers,
    shown,
)
from cmdstalk_py.ctl.wire import Wire

#: Largest job body ctl reads (peek, show, move): beyond it the command fails, unread.
BODY_LIMIT = 64 * 2**20
#: Largest stats or list-tubes reply ctl reads (a list of 16 MiB names ~80,000 tubes).
YAML_LIMIT = 16 * 2**20

#: stats-tube fields the commands compute with (tubes, top, clear, move).
TUBE_NUMBERS = ("current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
                "current-jobs-delayed", "current-jobs-buried", "current-waiting",
                "total-jobs", "cmd-delete", "pause", "pause-time-left")  # fmt: skip
#: stats-job fields the commands compute with (clear and move give a job back with them).
JOB_NUMBERS = ("id", "pri", "age", "delay", "ttr", "time-left")
JOB_STATES = ("ready", "delayed", "reserved", "buried")

Stats = dict[str, int | str]


@dataclass(frozen=True)
class Job:
    """A job as the server returned it."""

    id: int
    body: bytes


class Beanstalk:
    """beanstalkd's commands, as ctl uses them, on one connection."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire

    def _ask(self, command: bytes, expected: bytes, arity: int = 0) -> list[bytes]:
        self._wire.send(command + b"\r\n")
        return parse_reply(self._wire.line(), expected, arity)

    def _number(self, command: bytes, expected: bytes) -> int:
        return parse_number(self._ask(command, expected, 1)[0])

    def _job(self, command: bytes, expected: bytes = b"FOUND") -> Job:
        job_id, size = (parse_number(v) for v in self._ask(command, expected, 2))
        return Job(job_id, self._wire.block(size, BODY_LIMIT, "job body"))

    def _yaml(self, command: bytes) -> bytes:
        size = self._number(command, b"OK")
        return self._wire.block(size, YAML_LIMIT, f"{command.split()[0].decode()} reply")

    def use(self, tube: str) -> None:
        """Put and peek-ready/delayed/buried go to ``tube`` from now on."""
        (used,) = self._ask(b"use " + tube_bytes(tube), b"USING", 1)
        if used != tube.encode("ascii"):
            raise ServerFault(f"asked to use {tube}, the server uses '{shown(used)}'")

    def put(self, body: bytes, priority: int, delay: int, ttr: int) -> int:
        """A new job in the used tube: its id (``Buried`` if the server buried it)."""
        head = b"put %d %d %d %d\r\n" % (priority, delay, ttr, len(body))
        return self._number(head + body, b"INSERTED")

    def peek(self, job_id: int) -> Job:
        return self._job(b"peek %d" % job_id)

    def peek_ready(self) -> Job:
        return self._job(b"peek-ready")

    def peek_delayed(self) -> Job:
        return self._job(b"peek-delayed")

    def peek_buried(self) -> Job:
        return self._job(b"peek-buried")

    def reserve_job(self, job_id: int) -> Job:
        """Hold ``job_id`` (ready, delayed or buried) for ourselves."""
        return self._job(b"reserve-job %d" % job_id, b"RESERVED")

    def stats(self) -> Stats:
        """The server's stats, as it sent them."""
        return parse_stats(self._yaml(b"stats"))

    def stats_tube(self, tube: str) -> Stats:
        stats = parse_stats(self._yaml(b"stats-tube " + tube_bytes(tube)), "stats-tube")
        require_numbers(stats, TUBE_NUMBERS, "stats-tube")
        return stats

    def stats_job(self, job_id: int) -> Stats:
        stats = parse_stats(self._yaml(b"stats-job %d" % job_id), "stats-job")
        require_numbers(stats, JOB_NUMBERS, "stats-job")
        if stats.get("state") not in JOB_STATES or not isinstance(stats.get("tube"), str):
            raise ServerFault("stats-job reply lacks a known state or a tube")
        return stats

    def tubes(self) -> list[str]:
        """Every tube's name."""
        return parse_tube_list(self._yaml(b"list-tubes"))

    def kick(self, bound: int) -> int:
        """Kick up to ``bound`` jobs of the used tube: how many were."""
        return self._number(b"kick %d" % bound, b"KICKED")

    def kick_job(self, job_id: int) -> None:
        self._ask(b"kick-job %d" % job_id, b"KICKED")

    def delete(self, job_id: int) -> None:
        self._ask(b"delete %d" % job_id, b"DELETED")

    def release(self, job_id: int, priority: int, delay: int) -> None:
        self._ask(b"release %d %d %d" % (job_id, priority, delay), b"RELEASED")

    def bury(self, job_id: int, priority: int) -> None:
        self._ask(b"bury %d %d" % (job_id, priority), b"BURIED")

    def pause_tube(self, tube: str, seconds: int) -> None:
        self._ask(b"pause-tube %b %d" % (tube_bytes(tube), seconds), b"PAUSED")
