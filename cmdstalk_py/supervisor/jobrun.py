"""One reservation's life beside its command: the deadline, the command's requests, the end.

A ``JobRun`` is made per job by the broker's ``_handle``. While the command runs it is the
command's ``Lease`` (``process.lease``): it says when to kill the command (the TTR kill
schedule, ``--max-runtime``) and, with ``--keep-alive`` or when the command asks, touches
the job on the broker's own connection, from the broker's own thread (``run_command``
calls ``tick`` from its poll loop, so nothing else ever writes on that socket). It takes
the command's control requests (``on_control``). When the command has ended it turns the
process result, the job's stats and those requests into a ``policy.Decision``.
"""

from __future__ import annotations

import logging
import random
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from cmdstalk_py.client.errors import CONNECTION_ERRORS, NotFound, ReplyError
from cmdstalk_py.loop.futures import Future
from cmdstalk_py.process import KillReason, ProcessResult
from cmdstalk_py.process.control import ControlError, parse_request
from cmdstalk_py.process.result import LIMIT_KILLS
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.policy import Decision, KillPlan, Request, decide, kill_schedule
from cmdstalk_py.supervisor.results import Reason

if TYPE_CHECKING:
    from collections.abc import Callable

    from greenstalk import StatsJob

    from cmdstalk_py.client.aio import AsyncClient

log = logging.getLogger("cmdstalk.broker")

#: The longest progress note kept (characters); a longer one is cut.
MAX_PROGRESS = 200
#: A flood of ``touch`` requests costs at most one server round trip this often, seconds
#: (less for short TTRs, see ``_touch_interval``).
TOUCH_INTERVAL = 1.0
#: At most one warning about bad control requests per job this often, seconds.
WARN_INTERVAL = 5.0

_KILL_REASONS = {
    KillReason.TTR: Reason.TTR,
    KillReason.MAX_RUNTIME: Reason.MAX_RUNTIME,
    KillReason.SHUTDOWN: Reason.SHUTDOWN,
    KillReason.MEMORY: Reason.MEMORY,
    KillReason.CPU: Reason.CPU,
    KillReason.PROCS: Reason.PROCS,
}


class KillCounts:
    """How often this process killed each job at its deadline, for ``--on-timeout release``.

    The server counts only its own expiries (``timeouts``), and we kill before them, so our
    kills are counted here, per server and job id, for the most recent ``size`` jobs. A
    job that moves to another supervisor starts again at zero there; ``--max-releases``
    still bounds it, as every such kill is a release.
    """

    def __init__(self, size: int = 65536) -> None:
        self._size = size
        self._counts: OrderedDict[tuple[str, int], int] = OrderedDict()

    def add(self, server: str, job_id: int) -> int:
        """Count one more kill of ``job_id``; the kills so far, this one included."""
        key = (server, job_id)
        count = self._counts.pop(key, 0) + 1
        self._counts[key] = count
        if len(self._counts) > self._size:
            self._counts.popitem(last=False)
        return count


#: Shared by every broker of this process (one event loop, or one Spark task's loop at a
#: time): a released job may come back to another one.
KILLS = KillCounts()


class JobRun:
    """The lease, the control requests and the decision of one reserved job."""

    def __init__(
        self,
        config: Config,
        client: AsyncClient,
        job_id: int,
        stats: StatsJob,
        reserved_at: float,
        *,
        server: str,
        extra: dict[str, object],
        on_lost: Callable[[BaseException], None],
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.plan: KillPlan = kill_schedule(stats["ttr"], config.ttr_margin, config.kill_grace)
        self.job_id = job_id
        self.stats = stats
        self._client = client
        self._server = server
        self._extra = extra
        self._on_lost = on_lost
        self._rng = rng if rng is not None else (_RNG if config.backoff_jitter else None)
        # The server's TTR clock (re)started no later than this: reservation, last touch.
        self._base = reserved_at
        self._runtime_end = (
            reserved_at + config.max_runtime if config.max_runtime is not None else None
        )
        self._kill_now: float | None = None  # the reservation is gone: kill at once
        self._refused = False  # the server refused a touch: no more tries for this job
        self._touch_wanted = False
        self._touching = False  # a touch is out, its reply not in yet
        self._wake: Callable[[], None] | None = None
        self._last_touch = reserved_at
        self._warned_at: float | None = None
        self._ignored = 0
        self.touches = 0
        self.request: Request | None = None
        self.progress: str | None = None

    # -- the lease (process.lease.Lease) --------------------------------------------------

    def deadline(self) -> tuple[float, KillReason]:
        """When to TERM the command, and why."""
        if self._kill_now is not None:
            return self._kill_now, KillReason.TTR
        ttr_at = self._base + self.plan.term_after
        if self._runtime_end is not None and self._runtime_end <= ttr_at:
            return self._runtime_end, KillReason.MAX_RUNTIME
        return ttr_at, KillReason.TTR

    def attach(self, wake: Callable[[], None]) -> None:
        """``run_command``'s wake-up: called when a touch's reply moved the deadline."""
        self._wake = wake

    def next_tick(self) -> float | None:
        """When ``tick`` has a touch to send (None: never, as things stand)."""
        if self._kill_now is not None or self._refused or self._touching:
            return None
        due: float | None = None
        if self.config.keep_alive and self._touch_helps():
            # Halfway to the kill point: a slow touch still leaves time for another.
            due = self._base + self.plan.term_after / 2
        if self._touch_wanted:
            asked = self._last_touch + _touch_interval(self.plan)
            due = asked if due is None else min(due, asked)
        return due

    def tick(self, now: float) -> None:
        """Send a touch if one is due (keep-alive, or the command asked); never waits."""
        due = self.next_tick()
        if due is None or now < due:
            return
        self._touch_wanted = False
        if not self._touch_helps():
            return  # --max-runtime comes first: the reservation lasts until then
        # A silent server must not hold the kill: the reply must come before the kill
        # point (then the connection is dropped and the command killed at once).
        within = self.deadline()[0] - now
        self._touching = True
        reply = self._client.touch(self.job_id, within)
        reply.add_done_callback(lambda done: self._touched(done, now))

    def _touched(self, reply: Future[object], sent: float) -> None:
        self._touching = False
        error = reply.exception() if not reply.cancelled() else None
        if reply.cancelled():
            return
        if isinstance(error, NotFound):
            self._gone(sent, "NOT_FOUND on touch: the reservation had expired")
        elif isinstance(error, CONNECTION_ERRORS):
            self._on_lost(error)
            self._gone(sent, f"connection lost on touch: {error}")
        elif isinstance(error, ReplyError):
            # Not a touch the server takes: the TTR runs on, and the kill comes before it.
            log.warning("touch refused (%s); the TTR deadline stands", error, extra=self._extra)
            self._refused = True
        elif error is None:
            # The server restarted the TTR when it read the touch, after ``sent``.
            self._base = self._last_touch = sent
            self.touches += 1
        if self._wake is not None:
            self._wake()

    def _touch_helps(self) -> bool:
        """Whether a touch moves the deadline: not once ``--max-runtime`` comes first."""
        end = self._runtime_end
        return end is None or self._base + self.plan.term_after < end

    def _gone(self, now: float, why: str) -> None:
        # The job is no longer ours: another worker may run it; ours must stop now.
        log.warning("%s; killing the command", why, extra=self._extra)
        self._kill_now = now

    # -- the control channel --------------------------------------------------------------

    def on_control(self, line: bytes) -> None:
        """One line the command wrote on its control channel."""
        try:
            verb, arg = parse_request(line)
        except ControlError as e:
            self._ignore(str(e))
            return
        if verb == "touch":
            self._touch_wanted = True
            if self._wake is not None:
                self._wake()  # the command's timer re-reads next_tick
        elif verb == "retry-after":
            assert isinstance(arg, int)
            self.request = Request(retry_after=arg)
        elif verb == "bury":
            self.request = Request(bury=True)
        elif verb == "progress":
            assert isinstance(arg, str)
            self.progress = arg[:MAX_PROGRESS]

    def _ignore(self, why: str) -> None:
        """Log a bad request, at most once per ``WARN_INTERVAL``; count the others."""
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < WARN_INTERVAL:
            self._ignored += 1
            return
        more = f" (and {self._ignored} more ignored)" if self._ignored else ""
        log.warning("control channel: %s; ignored%s", why, more, extra=self._extra)
        self._warned_at, self._ignored = now, 0

    def finish(self) -> None:
        """The command has ended: report bad requests not reported yet."""
        if self._ignored:
            log.warning(
                "control channel: %d more bad requests ignored", self._ignored, extra=self._extra
            )
            self._ignored = 0

    # -- the end --------------------------------------------------------------------------

    def decide(self, proc: ProcessResult, stopping: bool) -> Decision:
        """What to do with the job now that its command has ended."""
        c = self.config
        deadline_kill = proc.killed in (KillReason.TTR, KillReason.MAX_RUNTIME)
        timeouts = 0
        if deadline_kill and not stopping and c.on_timeout == "release":
            kills = KILLS.add(self._server, self.job_id)
            timeouts = self.stats["timeouts"] + kills - self.stats["kicks"]
        return decide(
            exit_code=proc.exit_code,
            ttr_killed=deadline_kill,
            shutdown_killed=proc.killed is KillReason.SHUTDOWN,
            stopping=stopping,
            releases=self.stats["releases"],
            bury_exit_codes=c.bury_exit_codes,
            backoff_exponent=c.backoff_exponent,
            backoff_max=c.backoff_max,
            on_exit=c.on_exit,
            killed_by=_KILL_REASONS[proc.killed] if proc.killed else Reason.TTR,
            on_timeout=c.on_timeout,
            timeouts=timeouts,
            max_timeouts=c.max_timeouts,
            request=self.request,
            signaled=proc.signal is not None,
            rng=self._rng,
            limit_killed=_KILL_REASONS[proc.killed] if proc.killed in LIMIT_KILLS else None,
            on_limit=c.on_limit,
        )


def killed_reason(proc: ProcessResult | None) -> Reason | None:
    """Why the supervisor killed ``proc``'s command, as the result's ``killed``."""
    if proc is None or proc.killed is None:
        return None
    return _KILL_REASONS[proc.killed]


def _touch_interval(plan: KillPlan) -> float:
    return min(TOUCH_INTERVAL, plan.term_after / 4)


# One generator for the jitter of every broker: seeded by the OS, so supervisors started
# together do not draw the same delays.
_RNG = random.Random()
