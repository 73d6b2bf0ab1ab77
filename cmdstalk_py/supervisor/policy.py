"""What to do with a job: pure functions of its stats, the command's end and the config.

No I/O, no clock: the broker measures, these functions decide, and the unit tests check
every branch without a server. Go cmdstalk's rules are kept (releases⁴ backoff; bury,
unrun, a job reserved with 10 releases or after a server-side timeout); its defects are
not (see ``precheck`` and ``kill_schedule``).
"""

from __future__ import annotations

import enum
import functools
import random
from dataclasses import dataclass, field

from cmdstalk_py.supervisor.results import Outcome, Reason

# beanstalkd stores delays as 32-bit seconds.
MAX_DELAY = 2**32 - 1


class ExitAction(enum.Enum):
    """What ``--on-exit CODE=ACTION`` does with a job whose command exited with CODE."""

    DELETE = "delete"
    RELEASE = "release"  # at once, no delay
    BACKOFF = "backoff"  # along the backoff curve (the default for a non-zero exit)
    BURY = "bury"


@dataclass(frozen=True, slots=True)
class Decision:
    """The final action for one reservation: its outcome, for releases the delay, and
    the rule that decided (``reason``)."""

    outcome: Outcome
    delay: int | None = None
    #: Not compared: two decisions are the same action whatever rule made them.
    reason: Reason | None = field(default=None, compare=False)
    #: The beanstalkd command that carries out this decision: ``delete``, ``release``,
    #: ``bury`` or ``none``. Stored, not looked up on each use: hashing an enum member
    #: is a Python-level call, and a broker asks twice per job.
    command: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", _COMMANDS[self.outcome])


@dataclass(frozen=True, slots=True)
class Request:
    """What the command asked for on its control channel, applied only if it fails:
    ``bury``, or a release after ``retry_after`` seconds. The last request wins."""

    bury: bool = False
    retry_after: int | None = None


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
_DELETE = Decision(Outcome.DELETED, reason=Reason.EXIT_CODE)
_BURY = Decision(Outcome.BURIED, reason=Reason.ON_EXIT)
_TIMEOUT_BURY = Decision(Outcome.TIMEOUT_BURIED, reason=Reason.TTR)
_MAX_RELEASES_BURY = Decision(Outcome.PRECHECK_BURIED, reason=Reason.MAX_RELEASES)
_MAX_TIMEOUTS_BURY = Decision(Outcome.PRECHECK_BURIED, reason=Reason.MAX_TIMEOUTS)
_SHUTDOWN_RELEASE = Decision(Outcome.SHUTDOWN_RELEASED, 0, Reason.SHUTDOWN)


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
        return _MAX_TIMEOUTS_BURY
    if releases - kicks >= max_releases:
        return _MAX_RELEASES_BURY
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


def full_jitter(delay: int, rng: random.Random) -> int:
    """A delay drawn uniformly from 0 to ``delay`` seconds, both included ("full jitter").

    Spreads the retries of a burst of failures instead of bringing them all back in the
    same second; never longer than the curve (and so never past ``--backoff-max``).
    """
    return rng.randint(0, delay) if delay > 0 else 0


@functools.lru_cache(maxsize=64)  # pure; a broker's rules never change
def exit_rules(
    on_exit: tuple[tuple[int, str], ...], bury_exit_codes: frozenset[int]
) -> dict[int, ExitAction]:
    """Exit code → action: ``--bury-exit-codes`` (a shorthand for ``CODE=bury``) under the
    ``--on-exit`` rules, which win where both name a code."""
    rules = dict.fromkeys(bury_exit_codes, ExitAction.BURY)
    rules.update((code, ExitAction(action)) for code, action in on_exit)
    return rules


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
    on_exit: tuple[tuple[int, str], ...] = (),
    killed_by: Reason = Reason.TTR,
    on_timeout: str = "bury",
    timeouts: int = 0,
    max_timeouts: int = 1,
    request: Request | None = None,
    signaled: bool = False,
    rng: random.Random | None = None,
    limit_killed: Reason | None = None,
    on_limit: str = "bury",
) -> Decision:
    """The outcome of a command that ran (or failed to start: ``exit_code`` None).

    ``stopping``: the supervisor began shutting down before the command ended. Order
    matters: a command we killed while stopping is released at once with its priority,
    whether the kill came from the shutdown (timeout, second signal) or from its TTR
    deadline: on shutdown a job may use its whole TTR and is then released, not buried
    (issue 4), so stopping never costs a job its place (the release still counts in its
    ``releases``). Outside shutdown a deadline kill (``ttr_killed``; ``killed_by`` says
    whether it was the TTR or ``--max-runtime``) follows ``on_timeout`` (``_after_kill``).
    Then exit 0 deletes; on a failure a ``request`` from the command wins (it knows this
    run), then an exit-code rule (``exit_rules``), else (non-zero exit, death by a signal
    we did not send, a command that could not start) a release with backoff by the job's
    ``releases`` so far, always: as in Go, the releases limit is checked when the job is
    next reserved (``precheck``), not here. With ``rng``, backoff delays get full jitter.
    A command killed over a limit of its tree (``limit_killed``: memory, cpu, procs) is
    buried with that reason whatever it exited with, or with ``on_limit`` ``release``
    released along the curve (``--max-releases`` bounds its tries).
    The ``reason`` says which rule decided (``signaled``: ``exit_code`` None because a
    signal ended the command, rather than a failed start).
    """
    if shutdown_killed or (ttr_killed and stopping):
        return _SHUTDOWN_RELEASE
    if exit_code == 0 and not ttr_killed and not on_exit and limit_killed is None:
        return _DELETE  # the common case, before any backoff arithmetic
    curve = backoff_delay(releases, backoff_exponent, backoff_max)
    if rng is not None:
        curve = full_jitter(curve, rng)
    if limit_killed is not None:
        if on_limit == "release":
            return Decision(Outcome.RELEASED, curve, limit_killed)
        return Decision(Outcome.BURIED, reason=limit_killed)
    if ttr_killed:
        return _after_kill(killed_by, on_timeout, timeouts, max_timeouts, curve)
    if exit_code is not None:
        action = exit_rules(on_exit, bury_exit_codes).get(exit_code)
        if action is not None and (exit_code == 0 or request is None):
            return _ACTIONS[action](curve)
        if exit_code == 0:
            return _DELETE
    if request is not None:
        if request.retry_after is not None:
            delay = min(max(request.retry_after, 0), MAX_DELAY)
            return Decision(Outcome.RELEASED, delay, Reason.COMMAND_REQUEST)
        if request.bury:
            return Decision(Outcome.BURIED, reason=Reason.COMMAND_REQUEST)
    if exit_code is not None:
        return Decision(Outcome.RELEASED, curve, Reason.EXIT_CODE)
    return Decision(Outcome.RELEASED, curve, Reason.SIGNAL if signaled else Reason.NOT_STARTED)


def _after_kill(
    killed_by: Reason, on_timeout: str, timeouts: int, max_timeouts: int, curve: int
) -> Decision:
    """A command killed at its deadline (TTR or ``--max-runtime``), outside shutdown.

    ``bury`` (the default, as in Go) buries it. ``release`` puts it back along the backoff
    curve while its ``timeouts`` (counting this kill) stay under ``max_timeouts``, then
    buries it with the reason ``max_timeouts``.
    """
    if on_timeout != "release":
        if killed_by is Reason.TTR:
            return _TIMEOUT_BURY
        return Decision(Outcome.TIMEOUT_BURIED, reason=killed_by)
    if timeouts >= max_timeouts:
        return Decision(Outcome.TIMEOUT_BURIED, reason=Reason.MAX_TIMEOUTS)
    return Decision(Outcome.RELEASED, curve, killed_by)


_ACTIONS = {
    ExitAction.DELETE: lambda curve: Decision(Outcome.DELETED, reason=Reason.ON_EXIT),
    ExitAction.RELEASE: lambda curve: Decision(Outcome.RELEASED, 0, Reason.ON_EXIT),
    ExitAction.BACKOFF: lambda curve: Decision(Outcome.RELEASED, curve, Reason.ON_EXIT),
    ExitAction.BURY: lambda curve: _BURY,
}


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
