"""What to do with a job: pure functions of its stats, the command's end and the config.

No I/O, no clock: the broker measures, these functions decide, and the unit tests check
every branch without a server. Go cmdstalk's rules are kept (releases⁴ backoff; bury,
unrun, a job reserved with 10 releases or after a server-side timeout); its defects are
not (see ``precheck`` and ``kill_schedule``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from cmdstalk_py.supervisor.results import Outcome

# beanstalkd stores delays as 32-bit seconds.
MAX_DELAY = 2**32 - 1


@dataclass(frozen=True, slots=True)
class Decision:
    """The final action for one reservation: its outcome and, for releases, the delay."""

    outcome: Outcome
    delay: int | None = None
    #: The beanstalkd command that carries out this decision: ``delete``, ``release``,
    #: ``bury`` or ``none``. Stored, not looked up on each use: hashing an enum member
    #: is a Python-level call, and a broker asks twice per job.
    command: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", _COMMANDS[self.outcome])


_COMMANDS = {
    Outcome.DELETED: "delete",
    Outcome.RELEASED: "release",
    Outcome.SHUTDOWN_RELEASED: "release",
    Outcome.BURIED: "bury",
    Outcome.TIMEOUT_BURIED: "bury",
    Outcome.PRECHECK_BURIED: "bury",
    Outcome.LOST: "none",
}

# The decisions without a delay, made once: values are frozen, and a broker makes one per job.
_DELETE = Decision(Outcome.DELETED)
_BURY = Decision(Outcome.BURIED)
_TIMEOUT_BURY = Decision(Outcome.TIMEOUT_BURIED)
_PRECHECK_BURY = Decision(Outcome.PRECHECK_BURIED)


@dataclass(frozen=True, slots=True)
class KillPlan:
    """When to stop a job, in seconds after its reservation: SIGTERM, then SIGKILL."""

    term_after: float
    grace: float

    @property
    def kill_after(self) -> float:
        return self.term_after + self.grace


def precheck(
    releases: int, timeouts: int, kicks: int, *, max_releases: int, max_timeouts: int
) -> Decision | None:
    """Bury without running a job that has used up its tries; None means "run it".

    Go buried a job reserved with ``releases >= 10`` or ``timeouts >= 1``, so a kicked job
    was buried again at once, forever. Here each kick forgives one release and one
    server-side timeout: a job buried at the limit and kicked gets one more run (if that
    fails too, it is released and buried at its next reservation), and kicking a job out
    of its backoff delay never counts against it. Beanstalkd counts kicks but not releases
    since the last kick, hence the offset rather than a reset.
    """
    if timeouts - kicks >= max_timeouts:
        return _PRECHECK_BURY
    if releases - kicks >= max_releases:
        return _PRECHECK_BURY
    return None


def backoff_delay(releases: int, exponent: float = 4.0, cap: int | None = None) -> int:
    """Seconds to delay a job released after ``releases`` earlier releases.

    Go: releases⁴, so 0, 1, 16, 81, 256, … The result is clamped to ``cap`` (when given) and
    to what beanstalkd can store.
    """
    delay = int(max(releases, 0) ** exponent)
    if cap is not None:
        delay = min(delay, cap)
    return min(delay, MAX_DELAY)


def decide(
    *,
    exit_code: int | None,
    ttr_killed: bool,
    shutdown_killed: bool,
    stopping: bool,
    releases: int,
    bury_exit_codes: frozenset[int] = frozenset(),
    backoff_exponent: float = 4.0,
    backoff_max: int | None = None,
) -> Decision:
    """The outcome of a command that ran (or failed to start: ``exit_code`` None).

    ``stopping``: the supervisor began shutting down before the command ended. Order
    matters: a command we killed while stopping is released at once with its priority,
    whether the kill came from the shutdown (timeout, second signal) or from its TTR
    deadline: on shutdown a job may use its whole TTR and is then released, not buried
    (issue 4), so stopping never costs a job its place (the release still counts in its
    ``releases``). Outside shutdown a TTR kill is the job's own overrun and buries it. Then
    exit 0 deletes; an exit code listed as permanent buries; any other failure (non-zero
    exit, death by a signal we did not send, a command that could not start) releases with
    backoff by the job's ``releases`` so far, always: as in Go, the releases limit is
    checked when the job is next reserved (``precheck``), not here.
    """
    if shutdown_killed or (ttr_killed and stopping):
        return Decision(Outcome.SHUTDOWN_RELEASED, 0)
    if ttr_killed:
        return _TIMEOUT_BURY
    if exit_code == 0:
        return _DELETE
    if exit_code is not None and exit_code in bury_exit_codes:
        return _BURY
    return Decision(Outcome.RELEASED, backoff_delay(releases, backoff_exponent, backoff_max))


@functools.lru_cache(maxsize=256)  # pure, and jobs of a tube mostly share one TTR
def kill_schedule(ttr: int, margin: float, grace: float) -> KillPlan:
    """When to TERM and KILL a job's process group so it is dead before the server's TTR.

    Go signalled only after the TTR had expired, so the server had already taken the job
    back. Here the process must be dead ``margin`` seconds before the TTR (leaving time to
    bury it while we still hold the reservation), with SIGTERM ``grace`` seconds earlier.
    Both shrink for short TTRs: the margin to at most a quarter of the TTR, the grace to at
    most a third of what is left. TTR 1 → TERM at 0.5 s, KILL at 0.75 s; TTR 60 with the
    defaults (1 s, 2 s) → TERM at 57 s, KILL at 59 s.
    """
    ttr = max(ttr, 1)  # beanstalkd raises a TTR of 0 to 1 second
    margin = min(max(margin, 0.0), ttr / 4)
    budget = ttr - margin
    grace = min(max(grace, 0.0), budget / 3)
    return KillPlan(term_after=budget - grace, grace=grace)
