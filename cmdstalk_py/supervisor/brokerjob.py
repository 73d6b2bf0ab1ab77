"""One reserved job, start to end: ``stats-job``, policy, the command, delete/release/bury.

``JobRunner`` is the per-job half of a ``Broker`` (``broker.py`` has the worker loop, the
reserve and the connection): ``_handle`` takes a reserved job to its ``JobResult``;
``_run`` runs the command under its ``jobrun.JobRun`` (the deadline, keep-alive, the
command's requests, and the policy's decision at the end); ``_act`` carries the decision
out while the reservation is still ours.
The job's tube comes from its ``stats-job`` (a shared worker watches several).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from cmdstalk_py.client.connection import HealingConnection
from cmdstalk_py.client.errors import CONNECTION_ERRORS, Buried, NotFound
from cmdstalk_py.client.pipeline import Client, Job
from cmdstalk_py.ops.eventlog import WAIT as EVENT_LOG_WAIT
from cmdstalk_py.ops.observers import JobStart, Observer
from cmdstalk_py.process import ProcessResult, run_command
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.cmdcheck import CommandCheck
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.jobenv import job_environment
from cmdstalk_py.supervisor.joblog import JobLog
from cmdstalk_py.supervisor.jobrun import JobRun, killed_reason
from cmdstalk_py.supervisor.policy import Decision, precheck
from cmdstalk_py.supervisor.results import JobResult, Outcome

if TYPE_CHECKING:
    from greenstalk import StatsJob

log = logging.getLogger("cmdstalk.broker")

#: The last job's report is made while the next command runs only if that command's kill
#: point is further away than this: a report may block (the event log waits up to
#: ``EVENT_LOG_WAIT`` for a stalled disk), and the kill must not wait behind it.
REPORT_ROOM = 2 * EVENT_LOG_WAIT


class JobRunner:
    """The per-job methods of ``Broker``; the attributes are the broker's."""

    config: Config
    tube: str
    slot: int
    connection: HealingConnection
    reserve_timeout: int | None
    _observer: Observer
    _stop: threading.Event
    _kill: threading.Event
    _kill_now: threading.Event
    _budget: JobBudget
    _argv: list[str]
    _env: dict[str, str]
    _joblog: JobLog
    _cmdcheck: CommandCheck
    _ticket_held: bool

    def _report_pending(self) -> None:
        raise NotImplementedError

    def _job_started(self, tube: str) -> None:
        raise NotImplementedError

    def _job_done(self) -> None:
        raise NotImplementedError

    def _claim_ahead(self) -> bool:
        raise NotImplementedError

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
        tube = stats["tube"]
        self._job_started(tube)
        releases, timeouts = stats["releases"], stats["timeouts"]
        # A job reserved just as shutdown began runs like any other: releasing it unrun
        # would count a release against it, and it is bounded by its TTR all the same.
        proc: ProcessResult | None = None
        run: JobRun | None = None
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
                "buried without running by %s (releases=%d, timeouts=%d, kicks=%d)",
                decision.reason.value if decision.reason else "precheck",
                releases, timeouts, stats["kicks"],
                extra=self._joblog.extra(job.id, "precheck_buried"),
            )  # fmt: skip
        else:
            run = self._job_run(client, job, stats, reserved_at)
            proc = self._run(job, stats, run)
            self._cmdcheck.check(job.id, proc)
            # The stop event is never cleared: set now means set before the command ended.
            decision = run.decide(proc, stopping=self._stop.is_set())
            error = proc.spawn_error
        self._job_done()  # before the next claim: this job's slot is free again
        if prefetch and decision.command != "none":
            self._reserve_ahead(client)
        outcome, act_error = self._act(client, job, decision, stats["pri"])
        return JobResult(
            job_id=job.id,
            tube=tube,
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
            reason=decision.reason if outcome is decision.outcome else None,
            killed=killed_reason(proc),
            progress=run.progress if run else None,
            server=self.connection.address,
            pool=self.config.pool,
        )

    def _reserve_ahead(self, client: Client) -> None:
        """Send the next reserve with this job's final command, holding a ticket for it.

        Only when the next watch set is the one the connection has: changing it takes
        watch / ignore commands, which ``run_once`` sends before its own reserve.
        """
        if self._stop.is_set() or not self._budget.take():
            return
        if not self._claim_ahead():
            self._budget.give_back()
            return
        client.reserve_next(self.reserve_timeout)
        self._ticket_held = True

    def _job_run(self, client: Client, job: Job, stats: StatsJob, reserved_at: float) -> JobRun:
        return JobRun(
            self.config,
            client,
            job.id,
            stats,
            reserved_at,
            server=self.connection.address,
            extra=self._joblog.extra(job.id, "control"),
            on_lost=self.connection.drop,
        )

    def _run(self, job: Job, stats: StatsJob, run: JobRun) -> ProcessResult:
        env = job_environment(self._env, job.id, stats["tube"], stats, job.body)
        self._observer.broker_busy(self.tube, self.slot, True)
        budget = self._joblog.output_budget(job.id, self.config.output_rate)
        try:
            return run_command(
                self._argv,
                job.body,
                env,
                lease=run,
                grace=run.plan.grace,
                tail_bytes=self.config.tail_bytes,
                on_stdout_line=self._joblog.line_logger(job.id, "stdout"),
                on_stderr_line=self._joblog.line_logger(job.id, "stderr"),
                stop=self._kill,
                stop_now=self._kill_now,
                on_kill=self._joblog.kill_reporter(job.id),
                on_started=lambda: self._report_beside(run),
                on_spawned=lambda pid: self._report_start(job.id, stats, pid),
                # CMDSTALK_RUN: kills reach processes that left the group and the tree.
                marker=True,
                on_control=run.on_control,
                line_budget=budget,
            )
        finally:
            self._joblog.output_done()
            run.finish()
            self._observer.broker_busy(self.tube, self.slot, False)

    def _report_beside(self, run: JobRun) -> None:
        """The last job's report, while this job's command runs (``run_command`` calls this
        once the command has started), unless its kill point is within ``REPORT_ROOM``:
        the report then comes after the command."""
        if run.deadline()[0] - time.monotonic() > REPORT_ROOM:
            self._report_pending()

    def _report_start(self, job_id: int, stats: StatsJob, pid: int) -> None:
        """Tell the observers (the dashboard) the command runs, and what bounds it."""
        limit, kind = self.config.run_limit(stats["ttr"])
        self._observer.job_started(
            JobStart(
                self.config.pool, self.tube, self.slot, stats["tube"], job_id, pid,
                stats["ttr"], time.time(), limit, kind, self.connection.address,
            )
        )  # fmt: skip

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
            server=self.connection.address,
            pool=self.config.pool,
        )
        return result
