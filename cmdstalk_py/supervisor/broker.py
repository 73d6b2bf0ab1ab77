"""A broker (a worker): one thread, one connection, one watch set; runs jobs as processes.

``run_once()`` handles at most one job and returns its ``JobResult`` (None when the reserve
timed out or was cut short); ``run()`` loops on it until a stop event is set. Before each
reserve the worker asks its ``WatchPlan`` which tubes to watch (``--per-tube``: its one
tube; ``--workers``: every tube of its pool, less those held back by a per-tube limit or
rate, see ``gate.py``). Under ``run()`` an idle worker blocks in a plain ``reserve``: no
request, no wake-up until a job comes; ``interrupt()`` shuts its socket down to stop it or
to make it claim its watch set afresh. The per-job half (``stats-job``, policy, the
command, delete / release / bury) is ``brokerjob.JobRunner``. Any failure talking to the
server makes the job LOST (the server takes it back by itself) and the connection is
rebuilt; nothing here raises out of ``run()``.

Under ``run()`` the final command of a job goes out in one write with the next job's
reserve (``client.pipeline``): two round trips per job instead of three. A reserve already
sent when the broker stops is simply abandoned with the connection: the server puts back a
job reserved on a closed connection at once, unrun. For the same reason a job's report
(its log line, ``Observer.job_finished``) waits until the next command has started, when
the broker only waits for it: Python run right after a process exits is slow (its caches
are cold). A report never waits longer: a broker whose next job is not there within
``report_wait`` seconds, or that stops, reports first. And a command whose kill point is
near is not made to wait for it (a report may block on a stalled event log): the report
then follows that command (``brokerjob.REPORT_ROOM``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping

from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import CONNECTION_ERRORS, DeadlineSoon, TimedOut
from cmdstalk_py.client.pipeline import Client, Job
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.process import batch_thread, restore_thread
from cmdstalk_py.supervisor.brokerjob import JobRunner
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.cmdcheck import CommandCheck
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.joblog import JobLog
from cmdstalk_py.supervisor.results import JobResult
from cmdstalk_py.supervisor.watchplan import WatchPlan

log = logging.getLogger("cmdstalk.broker")


#: Seconds a finished job's report may wait for the next job (normally it is a round trip
#: away: the reserve went out with the delete); after that the broker reports, then waits.
REPORT_WAIT = 0.005


class Broker(JobRunner):
    """Runs jobs one at a time, as ``slot`` of ``tube``'s brokers (``--per-tube``) or of a
    pool's shared workers (``plan`` gives the watch set; ``tube`` is then the label).

    ``stop`` ends reserving (``run`` may be given another event); ``kill`` makes a running
    command be stopped (TERM, grace, KILL) and its job released; ``kill_now`` does the same
    with SIGKILL at once. ``budget`` is shared between brokers for ``--max-jobs``, ``outage``
    (connection failure reports) between all connections to the server; ``address``:
    (host, port) of the server, default the config's.
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
        plan: WatchPlan | None = None,
        address: tuple[str, int] | None = None,
    ) -> None:
        self.config = config
        self.tube = tube
        self.slot = slot
        self.where = f"{tube}:{slot}"
        self.plan = plan if plan is not None else WatchPlan((tube,))
        self._observer = observer or Observer()
        self._stop = stop or threading.Event()
        self._kill = kill or threading.Event()
        self._kill_now = kill_now or threading.Event()
        self._budget = budget or JobBudget(None)
        self._argv = config.argv()
        self._env = {**(os.environ if environ is None else environ), **dict(config.env)}
        self._joblog = JobLog(tube, slot, self._observer)
        self._cmdcheck = CommandCheck(self.where, {"tube": tube, "slot": slot})
        host, port = address if address is not None else (config.host, config.port)
        self.connection = HealingConnection(
            host,
            port,
            where=self.where,
            stop=self._stop,
            watch=self.plan.candidates() or None,
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
        self._rewatch = False  # interrupt() came outside reserve: claim afresh before it
        # Claims held for the next reserve, and the tube of the job running (``gate.py``).
        self._claimed: tuple[str, ...] | None = None
        self._running_tube: str | None = None
        # None: a plain reserve (run() without idle_timeout); standalone run_once() calls
        # keep the configured timeout, so they return when no job is there.
        self.reserve_timeout: int | None = config.reserve_timeout
        self._started_job = False
        self.retired = False  # set by the pool: this worker stops at its next reserve
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
        is spent, the pool retires this worker, or no job came for ``idle_timeout`` seconds
        (only then does it reserve with a timeout). Returns the number of jobs.

        With ``config.batch_scheduling`` and a single broker (``config.single_broker``) the
        calling thread runs under ``SCHED_BATCH`` until this returns (``process/sched.py``:
        it then gives way to its commands).
        """
        if stop_event is not None:
            self._stop = stop_event
            self.connection.stop = stop_event
        self.reserve_timeout = None if idle_timeout is None else self.config.reserve_timeout
        done = 0
        self._idle_since = time.monotonic()
        self._observer.broker_busy(self.tube, self.slot, False)
        batch = self.config.batch_scheduling and self.config.single_broker and batch_thread()
        try:
            # Connect before anything else, even before waiting for a --max-jobs ticket:
            # readiness (READY=1 to systemd) means "every broker is connected", and a broker
            # that waits for a ticket another broker holds must count as ready too.
            self.connection.client()
            while self._running() and (max_jobs is None or done < max_jobs):
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

    def _running(self) -> bool:
        return not (self._stop.is_set() or self.retired or self._budget.spent)

    def close(self) -> None:
        """Report what is unreported and close the connection (``run`` does this itself).

        Closing abandons a reserve sent ahead: the server puts its job back at once, unrun.
        """
        self._report_pending()
        self.connection.close()
        self._return_ticket()
        self._job_done()
        self.plan.release(self)

    def run_once(self, prefetch: bool = False) -> JobResult | None:
        """Reserve and handle one job; None when no job came within the reserve timeout
        (or there was nothing to watch, or the reserve was cut short).

        ``prefetch``: send the next reserve along with this job's final command, for a
        caller that calls ``run_once`` again (which then reads its reply). Raises
        ``Stopped`` when the stop event is set while (re)connecting.
        """
        client = self.connection.client()
        if self._ticket_held:
            self._ticket_held = False  # taken when the reserve was sent ahead
        elif not self._budget.take():
            return None
        if not client.reserve_in_flight and not self._watch_claimed():
            self._budget.give_back()
            return None
        if self._unreported is not None and not client.reply_ready(self.report_wait):
            self._report_pending()  # the reserve may block: report now, not after it
        job = self._reserve(client)
        self._claimed = None  # the claims are the gate's now: started() or release()
        if job is None:
            self._budget.give_back()
            self.plan.release(self)
            return None
        reserved_at = time.monotonic()
        started_at = time.time()
        self._observer.reserve_waited(self.tube, reserved_at - self._idle_since)
        self._started_job = False
        try:
            result = self._handle(client, job, reserved_at, started_at, prefetch)
        except BaseException:
            self._budget.give_back()  # the job goes back to the server with the connection
            self._job_done()
            self.plan.release(self)
            raise
        finally:
            self._idle_since = time.monotonic()
        if not self._started_job:
            self.plan.release(self)  # lost before its tube was known: claims go back
        self._budget.finish()
        self._report_pending()
        if self._ticket_held:
            self._unreported = result  # the next job follows at once: report it then
        else:
            self._report(result)
        return result

    def _reserve(self, client: Client) -> Job | None:
        """The reserve itself, which ``interrupt`` / ``rewatch`` may cut short."""
        with self._reserve_lock:
            if self._stop.is_set() or self.retired or self._rewatch:
                self._rewatch = False
                if client.reserve_in_flight:
                    # Its reply may be a job: the server takes it back with the connection.
                    self.connection.drop(planned=True)
                return None
            self._in_reserve = True
        job: Job | None = None
        error: BaseException | None = None
        try:
            job = client.reserve(self.reserve_timeout)
        except (TimedOut, DeadlineSoon):
            pass  # DEADLINE_SOON cannot happen: we hold no other job
        except CONNECTION_ERRORS as e:
            error = e
        finally:
            with self._reserve_lock:
                self._in_reserve = False
                interrupted, self._interrupted = self._interrupted, False
        if interrupted:
            # Shutdown (or a new watch set) cut the reserve short; a job it may just have
            # reserved went back to the server with the connection, unrun, no release.
            self.connection.drop(planned=True)
            return None
        if error is not None:
            self.connection.drop(error)
        return job

    def _claim(self) -> tuple[str, ...]:
        self._rewatch = False  # a rewatch asked before this claim is answered by it
        self._claimed = self.plan.claim(self)
        return self._claimed

    def _watch_claimed(self) -> bool:
        """Claim a watch set and have the connection watch it; False: reserve nothing now
        (nothing may be watched: this waits, with no request, until something changes)."""
        tubes = self._claimed or self._claim()
        if not tubes:
            self._report_pending()
            self.plan.wait(self, self._stop)
            return False
        try:
            self.connection.set_watch(tubes)
        except CONNECTION_ERRORS as e:
            self.plan.release(self)
            self._claimed = None
            self.connection.drop(e)
            return False
        return True

    def _claim_ahead(self) -> bool:
        """Claim the next watch set now; True if the reserve may go out with this job's
        final command (the connection already watches exactly that set)."""
        tubes = self._claim()
        return bool(tubes) and set(tubes) == set(self.connection.watching)

    def _job_started(self, tube: str) -> None:
        self._started_job = True
        self._running_tube = tube
        self._joblog.set_tube(tube)
        self.plan.started(self, tube)

    def _job_done(self) -> None:
        tube, self._running_tube = self._running_tube, None
        if tube is not None:
            self.plan.finished(tube)

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
        self.plan.gate.notify()  # a worker with nothing to watch waits on the gate

    def rewatch(self) -> None:
        """Make the worker claim its watch set afresh before it reserves (a tube came, went,
        or became servable): a reserve under way is cut short, a running job left alone.
        Thread-safe."""
        with self._reserve_lock:
            if self._in_reserve:
                self._interrupted = True
                self.connection.abort()
            else:
                self._rewatch = True
        self.plan.gate.notify()
