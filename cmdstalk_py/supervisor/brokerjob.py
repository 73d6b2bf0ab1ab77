"""One reserved job, start to end: ``stats-job``, policy, the command, delete/release/bury.

``JobHandler.handle`` takes a reserved job to its ``JobResult``, top to bottom: stats-job
→ precheck → run (under its ``jobrun.JobRun``: the deadline, keep-alive, the command's
requests) → decide → act. A ``Broker`` owns one handler and tells it, through a
``JobHooks``, when the job's tube is known (the gate counts it), when the job is over (its
slot is free) and when to send its next reserve along with the final command. The job's
tube comes from its ``stats-job`` (a shared worker watches several).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cmdstalk_py.client.aio import AsyncClient
from cmdstalk_py.client.connection import HealingConnection
from cmdstalk_py.client.errors import CONNECTION_ERRORS, Buried, NotFound
from cmdstalk_py.client.pipeline import Job
from cmdstalk_py.loop.futures import Future
from cmdstalk_py.ops.observers import JobStart, Observer
from cmdstalk_py.process import ProcessResult, run_command
from cmdstalk_py.process.switch import Switch
from cmdstalk_py.process.usage import Limits
from cmdstalk_py.supervisor.cmdcheck import CommandCheck
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.jobenv import job_environment
from cmdstalk_py.supervisor.joblog import JobLog
from cmdstalk_py.supervisor.jobrun import JobRun, killed_reason
from cmdstalk_py.supervisor.looptime import give_way
from cmdstalk_py.supervisor.policy import Decision, precheck
from cmdstalk_py.supervisor.results import JobResult, Outcome

if TYPE_CHECKING:
    from greenstalk import StatsJob

log = logging.getLogger("cmdstalk.broker")

#: Tubes whose short TTR was pointed out already (once per tube and process: every
#: worker of the process runs on one loop, or a Spark task's loop).
_SHORT_TTR_TOLD: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class JobHooks:
    """What the broker does at the turns of a job's life."""

    started: Callable[[str], None]  # the job's tube is known: it runs (the gate counts it)
    done: Callable[[], None]  # its command is over: the slot is free for the next claim
    report_pending: Callable[[], None]  # report the previous job now
    send_ahead: Callable[[AsyncClient], None]  # send the next reserve (after the final command)


@dataclass(frozen=True)
class Switches:
    """A pool's requests to its running commands and workers."""

    stop: Switch  # no new reservations (shutdown, a reload retiring the pool)
    kill: Switch  # stop running commands: TERM, grace, KILL (the shutdown timeout)
    kill_now: Switch  # SIGKILL running commands at once (a second signal)


class JobHandler:
    """Runs the jobs of one broker (``tube``/``slot`` label its results)."""

    def __init__(
        self,
        config: Config,
        tube: str,
        slot: int,
        connection: HealingConnection,
        observer: Observer,
        switches: Switches,
        environ: Mapping[str, str],
        joblog: JobLog,
    ) -> None:
        self.config = config
        self.tube = tube
        self.slot = slot
        self.connection = connection
        self.observer = observer
        self.switches = switches
        self.joblog = joblog
        self.argv = config.argv()
        self._environ = environ
        self._env: dict[str, str] | None = None
        self.limits = Limits(config.max_memory, config.max_cpu, config.max_procs)
        self.cmdcheck = CommandCheck(f"{tube}:{slot}", {"tube": tube, "slot": slot})

    @property
    def env(self) -> dict[str, str]:
        """The commands' environment before the job's own variables: made at the first
        job, not at start-up (a thousand idle workers need no copy of it each)."""
        if self._env is None:
            self._env = {**self._environ, **dict(self.config.env)}
        return self._env

    async def handle(
        self, client: AsyncClient, job: Job, reserved_at: float, started_at: float,
        hooks: JobHooks, ahead: bool,
    ) -> JobResult:  # fmt: skip
        """The job's whole life; ``ahead``: send the next reserve with its final command."""
        try:
            stats = await client.stats_job(job.id)
        except NotFound:
            return self._lost(job, started_at, "NOT_FOUND on stats-job: reservation expired")
        except CONNECTION_ERRORS as e:
            hooks.report_pending()  # before what is logged about this job
            self.connection.drop(e)
            return self._lost(job, started_at, f"connection lost before running: {e}")
        tube = stats["tube"]
        hooks.started(tube)
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
            hooks.report_pending()  # no command will start: the last job's report first
            log.warning(
                "buried without running by %s (releases=%d, timeouts=%d, kicks=%d)",
                decision.reason.value if decision.reason else "precheck",
                releases, timeouts, stats["kicks"],
                extra=self.joblog.extra(job.id, "precheck_buried"),
            )  # fmt: skip
        else:
            run = JobRun(
                self.config, client, job.id, stats, reserved_at,
                server=self.connection.address, extra=self.joblog.extra(job.id, "control"),
                on_lost=self.connection.drop,
            )  # fmt: skip
            _tell_short_ttr(tube, stats["ttr"], run)
            proc = await self._run(job, stats, run, hooks)
            self.cmdcheck.check(job.id, proc)
            # A stop is never undone: set now means set before the command ended.
            decision = run.decide(proc, stopping=self.switches.stop.is_set())
            error = proc.spawn_error
        hooks.done()  # before the next claim: this job's slot is free again
        client.hold()  # the final command and the next reserve in one write
        try:
            reply = self._send_act(client, job, decision, stats["pri"])
            if ahead and reply is not None:
                hooks.send_ahead(client)
        finally:
            client.send_held()
        outcome, act_error = await self._act_result(reply, decision)
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
            peak_memory_bytes=proc.usage.peak_memory if proc else None,
            cpu_s=proc.usage.cpu_s if proc else None,
            procs=proc.usage.procs if proc else None,
        )

    async def _run(self, job: Job, stats: StatsJob, run: JobRun, hooks: JobHooks) -> ProcessResult:
        await give_way()  # many jobs at once: their spawns spread over the loop's iterations
        env = job_environment(self.env, job.id, stats["tube"], stats, job.body)
        self.observer.broker_busy(self.tube, self.slot, True)
        budget = self.joblog.output_budget(job.id, self.config.output_rate)
        try:
            return await run_command(
                self.argv,
                job.body,
                env,
                lease=run,
                grace=run.plan.grace,
                tail_bytes=self.config.tail_bytes,
                on_stdout_line=self.joblog.line_logger(job.id, "stdout"),
                on_stderr_line=self.joblog.line_logger(job.id, "stderr"),
                stop=self.switches.kill,
                stop_now=self.switches.kill_now,
                on_kill=self.joblog.kill_reporter(job.id),
                # The last job's report, while this one's command runs.
                on_started=hooks.report_pending,
                on_spawned=lambda pid: self._report_start(job.id, stats, pid),
                # CMDSTALK_RUN: kills reach processes that left the group and the tree.
                marker=True,
                on_control=run.on_control,
                line_budget=budget,
                limits=self.limits,
            )
        finally:
            self.joblog.output_done()
            run.finish()
            self.observer.broker_busy(self.tube, self.slot, False)

    def _report_start(self, job_id: int, stats: StatsJob, pid: int) -> None:
        """Tell the observers (the dashboard) the command runs, and what bounds it."""
        limit, kind = self.config.run_limit(stats["ttr"])
        self.observer.job_started(
            JobStart(
                self.config.pool, self.tube, self.slot, stats["tube"], job_id, pid,
                stats["ttr"], time.time(), limit, kind, self.connection.address,
            )
        )  # fmt: skip

    def _send_act(
        self, client: AsyncClient, job: Job, decision: Decision, pri: int
    ) -> Future[Any] | None:
        """Send ``decision``'s command on the connection that holds the reservation.

        Never on a new connection: if ours broke while the command ran, the server has
        already put the job back (and may have given it to someone else).
        """
        command = decision.command
        if command == "delete":
            return client.delete(job.id)
        if command == "release":
            return client.release(job.id, pri, decision.delay or 0)
        if command == "bury":
            return client.bury(job.id, pri)
        return None

    async def _act_result(
        self, reply: Future[Any] | None, decision: Decision
    ) -> tuple[Outcome, str | None]:
        """The outcome of the final command; LOST if the reservation was no longer ours."""
        if reply is None:
            return decision.outcome, None
        command = decision.command
        try:
            await reply
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
        return JobResult(
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


def _tell_short_ttr(tube: str, ttr: int, run: JobRun) -> None:
    """A TTR that leaves the command half of it or less surprises a Go user (TTR 3 s:
    SIGTERM at 1.5 s): say so once per tube and TTR."""
    plan = run.plan
    if plan.term_after > ttr / 2 or (tube, ttr) in _SHORT_TTR_TOLD:
        return
    _SHORT_TTR_TOLD.add((tube, ttr))
    log.warning(
        "tube %s: a TTR of %d s leaves a command %.2g s before SIGTERM (SIGKILL %.2g s "
        "later), so that it is dead before the server's TTR; give such jobs a longer TTR, "
        "or use --keep-alive", tube, ttr, plan.term_after, plan.grace,
    )  # fmt: skip
