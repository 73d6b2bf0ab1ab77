"""What happened to one job: the value brokers return, tests inspect and the event log writes.

This module is the contract between the supervisor (which produces results), the event
log (which serialises them, one JSON object per line) and the Spark analytics (which read
that log). Field names here are the event-log field names; change them only with the
README's schema section and the Spark reader together.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Outcome(enum.Enum):
    """The final action taken on a job."""

    DELETED = "deleted"  # the command exited 0
    RELEASED = "released"  # non-zero exit: released with a backoff delay
    BURIED = "buried"  # permanent failure: an exit code listed in --bury-exit-codes
    TIMEOUT_BURIED = "timeout_buried"  # killed before its TTR elapsed, then buried
    PRECHECK_BURIED = "precheck_buried"  # buried unrun (max releases / max timeouts reached)
    SHUTDOWN_RELEASED = "shutdown_released"  # killed by shutdown, released for a later run
    LOST = "lost"  # connection lost or NOT_FOUND: the server had already taken the job back


class Reason(enum.Enum):
    """The rule that decided a job's outcome, or why the supervisor killed its command."""

    EXIT_CODE = "exit_code"  # the default rule: 0 deletes, anything else backs off
    ON_EXIT = "on_exit"  # a configured rule: --on-exit CODE=ACTION or --bury-exit-codes
    SIGNAL = "signal"  # the command died by a signal the supervisor did not send
    NOT_STARTED = "not_started"  # the command could not be started
    MAX_RELEASES = "max_releases"  # reserved with --max-releases releases: buried unrun
    MAX_TIMEOUTS = "max_timeouts"  # --max-timeouts reached (server expiries or our kills)
    COMMAND_REQUEST = "command_request"  # the command asked (retry-after, bury)
    TTR = "ttr"  # killed ahead of its TTR (or its reservation was gone)
    MAX_RUNTIME = "max_runtime"  # killed at --max-runtime
    SHUTDOWN = "shutdown"  # killed or released because the supervisor was stopping
    MEMORY = "memory"  # killed over --max-memory
    CPU = "cpu"  # killed over --max-cpu
    PROCS = "procs"  # killed over --max-procs


class JobResult(NamedTuple):
    """One finished job. Times are UNIX epoch seconds (float); tails are decoded text.

    Immutable, as every observer gets the same one.
    """

    job_id: int
    tube: str
    slot: int
    outcome: Outcome
    started_at: float
    ended_at: float
    priority: int
    ttr: int
    releases: int
    timeouts: int
    reserves: int
    age_s: int
    payload_bytes: int
    exit_code: int | None = None  # None when the command did not run or died by a signal
    signal: int | None = None  # the signal that ended the command, if any
    release_delay: int | None = None  # seconds, when outcome is RELEASED
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str | None = None  # why the job was LOST, or why the command could not start
    reason: Reason | None = None  # the rule that decided the outcome (None when LOST)
    killed: Reason | None = None  # why we killed the command: TTR, MAX_RUNTIME, SHUTDOWN,
    # or a limit (MEMORY, CPU, PROCS)
    progress: str | None = None  # the command's last ``progress`` note (control channel)
    server: str = ""  # host:port of the server the job came from (schema v2)
    pool: str = "default"  # the pool whose worker ran it (schema v2)
    # What the command's process tree used (schema v4; None: not run, or not known).
    peak_memory_bytes: int | None = None  # peak resident memory
    cpu_s: float | None = None  # user + system CPU seconds
    procs: int | None = None  # processes it started (known once its tree was sampled)

    @property
    def duration_ms(self) -> float:
        return (self.ended_at - self.started_at) * 1000.0
