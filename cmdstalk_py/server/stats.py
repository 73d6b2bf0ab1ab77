"""The YAML bodies of ``stats``, ``stats-job`` and ``stats-tube`` (docs §7), as 1.12 prints them."""

from __future__ import annotations

import os
import resource

from cmdstalk_py.server.job import Job
from cmdstalk_py.server.tube import Tube

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from cmdstalk_py.server.standins import NamedTuple

#: The cmd-* counters, in the order ``stats`` prints them.
CMD_COUNTERS = (
    "put",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve",
    "reserve-with-timeout",
    "delete",
    "release",
    "use",
    "watch",
    "ignore",
    "bury",
    "kick",
    "touch",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
    "pause-tube",
)


def _uname() -> tuple[str, str, str]:
    u = os.uname()
    return u.nodename, u.version, u.machine


class ServerInfo:
    """Facts about the server process printed by ``stats`` (this process's by default)."""

    # A plain class: importing dataclasses (and inspect) would slow the server's start-up.
    __slots__ = ("hostname", "instance_id", "os_version", "pid", "platform")

    def __init__(
        self,
        pid: int | None = None,
        instance_id: str | None = None,
        hostname: str | None = None,
        os_version: str | None = None,
        platform: str | None = None,
    ) -> None:
        uname = _uname()
        self.pid = os.getpid() if pid is None else pid
        self.instance_id = os.urandom(8).hex() if instance_id is None else instance_id
        self.hostname = uname[0] if hostname is None else hostname
        self.os_version = uname[1] if os_version is None else os_version
        self.platform = uname[2] if platform is None else platform


def rusage() -> tuple[float, float]:
    """(user, system) CPU seconds of this process."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def _secs(value: float) -> str:
    micros = round(value * 1_000_000)
    whole, frac = divmod(micros, 1_000_000)
    return f"{whole}.{frac:06d}"


def seconds_left(deadline: float, now: float) -> int:
    """(deadline - now) in whole seconds, truncated toward zero like 1.12's integer division."""
    return int(deadline - now)


def job_yaml(job: Job, now: float, file_number: int) -> bytes:
    """The ``stats-job`` body."""
    state = job.state.value
    time_left = seconds_left(job.deadline, now) if state in ("reserved", "delayed") else 0
    return (
        f"---\nid: {job.id}\ntube: {job.tube.name.decode('latin-1')}\nstate: {state}\n"
        f"pri: {job.pri}\nage: {seconds_left(now, job.created)}\ndelay: {job.delay}\n"
        f"ttr: {job.ttr}\ntime-left: {time_left}\nfile: {file_number}\n"
        f"reserves: {job.reserves}\ntimeouts: {job.timeouts}\nreleases: {job.releases}\n"
        f"buries: {job.buries}\nkicks: {job.kicks}\n"
    ).encode()


def tube_yaml(tube: Tube, now: float) -> bytes:
    """The ``stats-tube`` body (1.12 order: using, watching, waiting)."""
    paused = tube.paused
    pause = tube.pause if paused else 0
    left = max(0, seconds_left(tube.unpause_at, now)) if paused else 0
    return (
        f"---\nname: {tube.name.decode('latin-1')}\ncurrent-jobs-urgent: {tube.urgent}\n"
        f"current-jobs-ready: {len(tube.ready)}\ncurrent-jobs-reserved: {tube.reserved}\n"
        f"current-jobs-delayed: {len(tube.delayed)}\n"
        f"current-jobs-buried: {len(tube.buried)}\ntotal-jobs: {tube.total_jobs}\n"
        f"current-using: {tube.using}\ncurrent-watching: {tube.watching}\n"
        f"current-waiting: {len(tube.waiting)}\ncmd-delete: {tube.cmd_delete}\n"
        f"cmd-pause-tube: {tube.cmd_pause}\npause: {pause}\npause-time-left: {left}\n"
    ).encode()


class GlobalStats(NamedTuple):
    """The values of ``stats`` that the engine knows; rendered by :func:`stats_yaml`."""

    urgent: int
    ready: int
    reserved: int
    delayed: int
    buried: int
    counters: dict[str, int]
    job_timeouts: int
    total_jobs: int
    max_job_size: int
    tubes: int
    connections: int
    producers: int
    workers: int
    waiting: int
    total_connections: int
    uptime: float
    binlog: tuple[int, int, int, int, int]
    draining: bool


def stats_yaml(s: GlobalStats, info: ServerInfo, cpu: tuple[float, float]) -> bytes:
    """The ``stats`` body, every key in 1.12's order."""
    lines = [
        "---",
        f"current-jobs-urgent: {s.urgent}",
        f"current-jobs-ready: {s.ready}",
        f"current-jobs-reserved: {s.reserved}",
        f"current-jobs-delayed: {s.delayed}",
        f"current-jobs-buried: {s.buried}",
    ]
    lines.extend(f"cmd-{name}: {s.counters[name]}" for name in CMD_COUNTERS)
    oldest, current, migrated, written, max_size = s.binlog
    lines += [
        f"job-timeouts: {s.job_timeouts}",
        f"total-jobs: {s.total_jobs}",
        f"max-job-size: {s.max_job_size}",
        f"current-tubes: {s.tubes}",
        f"current-connections: {s.connections}",
        f"current-producers: {s.producers}",
        f"current-workers: {s.workers}",
        f"current-waiting: {s.waiting}",
        f"total-connections: {s.total_connections}",
        f"pid: {info.pid}",
        'version: "1.12"',
        f"rusage-utime: {_secs(cpu[0])}",
        f"rusage-stime: {_secs(cpu[1])}",
        f"uptime: {int(s.uptime)}",
        f"binlog-oldest-index: {oldest}",
        f"binlog-current-index: {current}",
        f"binlog-records-migrated: {migrated}",
        f"binlog-records-written: {written}",
        f"binlog-max-size: {max_size}",
        f"draining: {'true' if s.draining else 'false'}",
        f"id: {info.instance_id}",
        f"hostname: {info.hostname}",
        f"os: {info.os_version}",
        f"platform: {info.platform}",
    ]
    return ("\n".join(lines) + "\n").encode()
