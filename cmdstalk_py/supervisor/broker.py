"""A broker: one thread, one connection, one tube; reserves jobs and runs each as a process.

``run_once()`` handles at most one job and returns its ``JobResult`` (None when the reserve
timed out); ``run()`` loops on it until a stop event is set. Per job: reserve, one
``stats-job``, policy (``policy.py``), the command (``process.run_command``) with a deadline
before the TTR, then delete / release / bury while the reservation is still ours. Any
failure talking to the server makes the job LOST (the server takes it back by itself) and
the connection is rebuilt; nothing here raises out of ``run()``.

Under ``run()`` the final command of a job goes out in one write with the next job's
reserve (``client.pipeline``): two round trips per job instead of three. A reserve already
sent when the broker stops is simply abandoned with the connection: the server puts back a
job reserved on a closed connection at once, unrun. For the same reason a job's report
(its log line, ``Observer.job_finished``) waits until the next command has started, when
the broker only waits for it: Python run right after a process exits is slow (its caches
are cold). A report never waits longer: a broker whose next job is not there within
``report_wait`` seconds, or that stops, reports first.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import (
    CONNECTION_ERRORS,
    Buried,
    DeadlineSoon,
    NotFound,
    TimedOut,
)
from cmdstalk_py.client.pipeline import Client, Job
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.process import (
    KillReason,
    ProcessResult,
    batch_thread,
    restore_thread,
    run_command,
)
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.cmdcheck import CommandCheck
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.jobenv import job_environment
from cmdstalk_py.supervisor.joblog import JobLog
from cmdstalk_py.supervisor.policy import Decision, decide, kill_schedule, precheck
from cmdstalk_py.supervisor.results import JobResult, Outcome

if TYPE_CHECKING:
    from greenstalk import StatsJob

log = logging.getLogger("cmdstalk.broker")


#: Seconds a finished job's report may wait for the next job (normally it is a round trip
#: away: the reserve went out with the delete); after that the broker reports, then waits.
REPORT_WAIT = 0.005


class Broker:
    """Runs the jobs of one tube, one at a time, as ``slot`` of that tube's brokers.

    ``stop`` ends reserving (``run`` may be given another event); ``kill`` makes a running
    command be stopped (TERM, grace, KILL) and its job released; ``kill_now`` does the same
    with SIGKILL at once. ``budget`` is shared between brokers for ``--max-jobs``, ``outage``
    (connection failure reports) between all connections to the server.
    Usable standalone: ``Broker(config, "mail", 0).run(stop_event)``.
    """

    def __init__(
        self,
        config: Config,
        tube: str,
        slot: int,
        observer: Observer | None = None,
        *,
        stop: threading.Event | None = None,
        kill: threading.Event | None = None,
        kill_now: threading.Event | None = None,
        budget: JobBudget | None = None,
        environ: Mapping[str, str] | None = None,
        outage: OutageReporter | None = None,
    ) -> None:
        self.config = config
        self.tube = tube
        self.slot = slot
        self.where = f"{tube}:{slot}"
        self._observer = observer or Observer()
        self._stop = stop or threading.Event()
        self._kill = kill or threading.Event()
        self._kill_now = kill_now or threading.Event()
        self._budget = budget or JobBudget(None)
        self._argv = config.argv()
        self._env = dict(os.environ if environ is None else environ)
        self._joblog = JobLog(tube, slot, self._observer)
        self._cmdcheck = CommandCheck(self.where, {"tube": tube, "slot": slot})
        self.connection = HealingConnection(
            config.host,
            config.port,
            where=self.where,
            stop=self._stop,
            watch=tube,
            io_timeout=config.io_timeout,
            max_wait=config.reconnect_max_wait,
            observer=self._observer,
            outage=outage,
        )
        self._idle_since = time.monotonic()
        # interrupt() may cut a reserve short, never a job: the flag says which one we are in.
        self._reserve_lock = threading.Lock()
        self._in_reserve = False
        self._interrupted = False
        # A --max-jobs ticket taken for a reserve sent ahead (see run_once's ``prefetch``).
        self._ticket_held = False
        # The last job's result, reported once the next command runs (see the docstring).
        self._unreported: JobResult | None = None
        self.report_wait = REPORT_WAIT

    # -- the loop -------------------------------------------------------------------------

    def run(
        self,
        stop_event: threading.Event | None = None,
        max_jobs: int | None = None,
        idle_timeout: float | None = None,
    ) -> int:
        """Handle jobs until ``stop_event`` is set, ``max_jobs`` are done, the shared budget
        is spent, or no job came for ``idle_timeout`` seconds. Returns the number of jobs.

        With ``config.batch_scheduling`` and a single broker (``config.single_broker``) the
        calling thread runs under ``SCHED_BATCH`` until this returns (``process/sched.py``:
        it then gives way to its commands).
        """
        if stop_event is not None:
            self._stop = stop_event
            self.connection.stop = stop_event
        done = 0
        self._idle_since = time.monotonic()
        self._observer.broker_busy(self.tube, self.slot, False)
        batch = self.config.batch_scheduling and self.config.single_broker and batch_thread()
        try:
            # Connect before anything else, even before waiting for a --max-jobs ticket:
            # readiness (READY=1 to systemd) means "every broker is connected", and a broker
            # that waits for a ticket another broker holds must count as ready too.
            self.connection.client()
            while not self._stop.is_set() and (max_jobs is None or done < max_jobs):
                if self._budget.spent:
                    break
                if self._budget.busy and not self._ticket_held:
                    # Other brokers hold the last tickets; one may come back.
                    self._stop.wait(0.05)
                    continue
                try:
                    # Reserve ahead only when another run_once will read the reply.
                    result = self.run_once(prefetch=max_jobs is None or done + 1 < max_jobs)
                except Stopped:
                    break
                except Exception:
                    # A bug must not kill the thread or leave a job half-handled: dropping
                    # the connection makes the server take back whatever we held.
                    self._report_pending()
                    log.exception("%s: unexpected error; reconnecting", self.where)
                    self.connection.drop()
                    self._stop.wait(1.0)
                    continue
                if result is not None:
                    done += 1
                elif (
                    idle_timeout is not None
                    and time.monotonic() - self._idle_since >= idle_timeout
                ):
                    break
        except Stopped:
            pass  # stopped while connecting
        finally:
            self.close()
            if batch:
                restore_thread()
        return done

    def close(self) -> None:
        """Report what is unreported and close the connection (``run`` does this itself).

        Closing abandons a reserve sent ahead: the server puts its job back at once, unrun.
        """
        self._report_pending()
        self.connection.close()
        self._return_ticket()

    def run_once(self, prefetch: bool = False) -> JobResult | None:
        """Reserve and handle one job; None when no job came within the reserve timeout.

        ``prefetch``: send the next reserve along with this job's final command, for a
        caller that calls ``run_once`` again (which then reads its reply). Raises
        ``Stopped`` when the stop event is set while (re)connecting.
        """
        client = self.connection.client()
        if self._ticket_held:
            self._ticket_held = False  # taken when the reserve was sent ahead
        elif not self._budget.take():
            return None
        if self._unreported is not None and not client.reply_ready(self.report_wait):
            self._report_pending()  # the reserve may block: report now, not after it
        with self._reserve_lock:
            if self._stop.is_set():
                self._budget.give_back()
                return None
            self._in_reserve = True
        job: Job | None = None
        error: BaseException | None = None
        try:
            job = client.reserve(self.config.reserve_timeout)
        except (TimedOut, DeadlineSoon):
            pass  # DEADLINE_SOON cannot happen: we hold no other job
        except CONNECTION_ERRORS as e:
            error = e
        finally:
            with self._reserve_lock:
                self._in_reserve = False
                interrupted, self._interrupted = self._interrupted, False
        if interrupted:
            # Shutdown cut the reserve short; a job it may just have reserved went back to
            # the server with the connection, unrun and uncounted.
            self._budget.give_back()
            self.connection.drop()
            return None
        if job is None:
            self._budget.give_back()
            if error is not None:
                self.connection.drop(error)
            return None
        reserved_at = time.monotonic()
        started_at = time.time()
        self._observer.reserve_waited(self.tube, reserved_at - self._idle_since)
        try:
            result = self._handle(client, job, reserved_at, started_at, prefetch)
        except BaseException:
            self._budget.give_back()  # the job goes back to the server with the connection
            raise
        finally:
            self._idle_since = time.monotonic()
        self._budget.finish()
        self._report_pending()
        if self._ticket_held:
            self._unreported = result  # the next job follows at once: report it then
        else:
            self._report(result)
        return result

    def _report(self, result: JobResult) -> None:
        self._joblog.result(result)
        self._observer.job_finished(result)

    def _report_pending(self) -> None:
        result, self._unreported = self._unreported, None
        if result is not None:
            self._report(result)

    def _return_ticket(self) -> None:
        if self._ticket_held:
            self._ticket_held = False
            self._budget.give_back()

    def interrupt(self) -> None:
        """Wake a broker blocked in reserve, or (re)connecting to a server that does not
        answer, so it sees the stop event now. A broker running a job is left alone.
        Thread-safe.
        """
        with self._reserve_lock:
            if self._in_reserve:
                self._interrupted = True
                self.connection.abort()
            elif not self.connection.connected.is_set():
                self.connection.abort()  # it holds no job: nothing to hand back

    # -- one job --------------------------------------------------------------------------

    def _handle(
        self, client: Client, job: Job, reserved_at: float, started_at: float, prefetch: bool
    ) -> JobResult:
        try:
            stats = client.stats_job(job.id)
        except NotFound:
            return self._lost(job, started_at, "NOT_FOUND on stats-job: reservation expired")
        except CONNECTION_ERRORS as e:
            self._report_pending()  # before what is logged about this job
            self.connection.drop(e)
            return self._lost(job, started_at, f"connection lost before running: {e}")
        releases, timeouts = stats["releases"], stats["timeouts"]
        # A job reserved just as shutdown began runs like any other: releasing it unrun
        # would count a release against it, and it is bounded by its TTR all the same.
        proc: ProcessResult | None = None
        error: str | None = None
        decision = precheck(
            releases,
            timeouts,
            stats["kicks"],
            max_releases=self.config.max_releases,
            max_timeouts=self.config.max_timeouts,
        )
        if decision is not None:
            self._report_pending()  # no command will start: the last job's report goes first
            log.warning(
                "buried without running (releases=%d, timeouts=%d, kicks=%d)",
                releases, timeouts, stats["kicks"],
                extra=self._joblog.extra(job.id, "precheck_buried"),
            )  # fmt: skip
        else:
            proc = self._run(job, stats, reserved_at)
            self._cmdcheck.check(job.id, proc)
            decision = self._decide(proc, releases)
            error = proc.spawn_error
        if prefetch and decision.command != "none":
            self._reserve_ahead(client)
        outcome, act_error = self._act(client, job, decision, stats["pri"])
        return JobResult(
            job_id=job.id,
            tube=self.tube,
            slot=self.slot,
            outcome=outcome,
            started_at=started_at,
            ended_at=time.time(),
            priority=stats["pri"],
            ttr=stats["ttr"],
            releases=releases,
            timeouts=timeouts,
            reserves=stats["reserves"],
            age_s=stats["age"],
            payload_bytes=len(job.body),
            exit_code=proc.exit_code if proc else None,
            signal=proc.signal if proc else None,
            release_delay=decision.delay if outcome is Outcome.RELEASED else None,
            stdout_tail=proc.stdout_tail.decode("utf-8", "replace") if proc else "",
            stderr_tail=proc.stderr_tail.decode("utf-8", "replace") if proc else "",
            error=act_error or error,
        )

    def _reserve_ahead(self, client: Client) -> None:
        """Send the next reserve with this job's final command, holding a ticket for it."""
        if not self._stop.is_set() and self._budget.take():
            client.reserve_next(self.config.reserve_timeout)
            self._ticket_held = True

    def _run(self, job: Job, stats: StatsJob, reserved_at: float) -> ProcessResult:
        plan = kill_schedule(stats["ttr"], self.config.ttr_margin, self.config.kill_grace)
        env = job_environment(self._env, job.id, self.tube, stats, job.body)
        self._observer.broker_busy(self.tube, self.slot, True)
        try:
            return run_command(
                self._argv,
                job.body,
                env,
                deadline=reserved_at + plan.term_after,
                grace=plan.grace,
                tail_bytes=self.config.tail_bytes,
                on_stdout_line=self._joblog.line_logger(job.id, "stdout"),
                on_stderr_line=self._joblog.line_logger(job.id, "stderr"),
                stop=self._kill,
                stop_now=self._kill_now,
                on_kill=self._joblog.kill_reporter(job.id),
                on_started=self._report_pending,
                on_spawned=lambda pid: self._observer.job_started(
                    self.tube, self.slot, job.id, pid, stats["ttr"], time.time()
                ),
                # CMDSTALK_RUN: kills reach processes that left the group and the tree.
                marker=True,
            )
        finally:
            self._observer.broker_busy(self.tube, self.slot, False)

    def _decide(self, proc: ProcessResult, releases: int) -> Decision:
        c = self.config
        return decide(
            exit_code=proc.exit_code,
            ttr_killed=proc.killed is KillReason.TTR,
            shutdown_killed=proc.killed is KillReason.SHUTDOWN,
            # The stop event is never cleared: set now means set before the command ended.
            stopping=self._stop.is_set(),
            releases=releases,
            bury_exit_codes=c.bury_exit_codes,
            backoff_exponent=c.backoff_exponent,
            backoff_max=c.backoff_max,
        )

    def _act(
        self, client: Client, job: Job, decision: Decision, pri: int
    ) -> tuple[Outcome, str | None]:
        """Carry out ``decision`` on the reservation we hold; LOST if it is no longer ours.

        Never on a new connection: if ours broke while the command ran, the server has
        already put the job back (and may have given it to someone else).
        """
        command = decision.command
        try:
            if command == "delete":
                client.delete(job.id)
            elif command == "release":
                client.release(job.id, pri, decision.delay or 0)
            elif command == "bury":
                client.bury(job.id, pri)
        except NotFound:
            return Outcome.LOST, f"NOT_FOUND on {command}: the reservation had expired"
        except Buried:
            # release could not grow the server's queue (out of memory): it buried the job.
            return Outcome.BURIED, "server buried the job on release (out of memory)"
        except CONNECTION_ERRORS as e:
            self.connection.drop(e)
            return Outcome.LOST, f"connection lost before {command}: {e}"
        return decision.outcome, None

    def _lost(self, job: Job, started_at: float, error: str) -> JobResult:
        result = JobResult(
            job_id=job.id,
            tube=self.tube,
            slot=self.slot,
            outcome=Outcome.LOST,
            started_at=started_at,
            ended_at=time.time(),
            priority=0,
            ttr=0,
            releases=0,
            timeouts=0,
            reserves=0,
            age_s=0,
            payload_bytes=len(job.body),
            error=error,
        )
        return result
