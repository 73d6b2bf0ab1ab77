"""A broker (a worker): one connection, one watch set, one job at a time, on the event loop.

``serve()`` is the worker's coroutine: reserve → the job (``brokerjob.JobHandler``:
stats-job → precheck → run → decide → act) → report, until its pool stops it, retires it,
or the ``--max-jobs`` budget is spent. ``handle_one()`` is one turn of it. Before each
reserve the worker asks its ``WatchPlan`` which tubes to watch (``--per-tube``: its one
tube; ``--workers``: every tube of its pool, less those held back by a per-tube limit or
rate, see ``gate.py``). An idle worker waits in a plain ``reserve``: no request, no
wake-up until a job comes; ``interrupt()`` closes its connection to stop it, ``rewatch()``
to make it claim its watch set afresh (a job the server may just have handed it goes back
with the connection, unrun). Any failure talking to the server makes the job LOST (the
server takes it back by itself) and the connection is rebuilt; nothing raises out of
``serve()``.

A job's final command and the next reserve go out together (``AsyncClient`` pipelines
whatever is sent before its reply is awaited): two round trips per job instead of three. A
job's report (its log line, ``Observer.job_finished``) is made once the next command has
started, when the worker only waits for it; a worker whose next job is not there within
``report_wait`` seconds, or that stops, reports first.

Standalone (tests, a Spark task): ``run(stop_event)`` serves on a loop of the calling
thread's own, ``run_once()`` takes one turn on it (``standalone.py``).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping

from cmdstalk_py.client.aio import AsyncClient
from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import CONNECTION_ERRORS, DeadlineSoon, TimedOut
from cmdstalk_py.client.pipeline import Job
from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.futures import Future
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.process import batch_thread, restore_thread
from cmdstalk_py.process.switch import Switch
from cmdstalk_py.supervisor.brokerjob import JobHandler, JobHooks, Switches
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.joblog import JobLog
from cmdstalk_py.supervisor.results import JobResult
from cmdstalk_py.supervisor.watchplan import WatchPlan

log = logging.getLogger("cmdstalk.broker")

#: Seconds a finished job's report may wait for the next job (normally it is a round trip
#: away: the reserve went out with the delete); after that the broker reports, then waits.
REPORT_WAIT = 0.005
#: After an unexpected error, the pause before the worker tries again.
ERROR_PAUSE = 1.0


def new_switches() -> Switches:
    return Switches(Switch(), Switch(), Switch())


class Broker:
    """Runs jobs one at a time, as ``slot`` of ``tube``'s brokers (``--per-tube``) or of a
    pool's shared workers (``plan`` gives the watch set; ``tube`` is then the label).

    ``switches``: the pool's stop (no new reservations), kill (running commands TERM,
    grace, KILL; their jobs released) and kill-now (SIGKILL at once). ``budget`` is shared
    between brokers for ``--max-jobs``, ``outage`` (connection failure reports) between all
    connections to the server; ``address``: (host, port) of the server, default the config's.
    Usable standalone: ``Broker(config, "mail", 0).run(stop_event)``.
    """

    def __init__(
        self,
        config: Config,
        tube: str,
        slot: int,
        observer: Observer | None = None,
        *,
        switches: Switches | None = None,
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
        self.switches = switches if switches is not None else new_switches()
        self._observer = observer or Observer()
        self._budget = budget or JobBudget(None)
        self._joblog = JobLog(tube, slot, self._observer)
        host, port = address if address is not None else (config.host, config.port)
        self.connection = HealingConnection(
            host,
            port,
            where=self.where,
            watch=self.plan.candidates() or None,
            io_timeout=config.io_timeout,
            max_wait=config.reconnect_max_wait,
            observer=self._observer,
            outage=outage,
        )
        self._handler = JobHandler(
            config, tube, slot, self.connection, self._observer, self.switches,
            os.environ if environ is None else environ, self._joblog,
        )  # fmt: skip
        self._hooks = JobHooks(
            self._job_started, self._job_done, self._report_pending, self._send_ahead
        )
        self._loop: Loop | None = None
        self._own_loop: Loop | None = None  # standalone run_once()
        self._idle_since = time.monotonic()
        self._in_reserve = False
        self._interrupted = False  # interrupt()/rewatch() cut the reserve under way
        self._rewatch = False  # rewatch() came outside reserve: claim afresh before it
        self._nudge: Future[None] | None = None  # what an idle wait waits on
        # Claims held for the next reserve, and the tube of the job running (``gate.py``).
        self._claimed: tuple[str, ...] | None = None
        self._running_tube: str | None = None
        self._started_job = False
        # None: a plain reserve (serve() without idle_timeout); standalone handle_one()
        # calls keep the configured timeout, so they return when no job is there.
        self.reserve_timeout: int | None = config.reserve_timeout
        self.retired = False  # set by the pool: this worker stops at its next reserve
        self._ahead: Future[Job] | None = None  # a reserve sent with the last job's end
        self._ticket_held = False  # a --max-jobs ticket taken for that reserve
        # The last job's result, reported once the next command runs (see the docstring).
        self._unreported: JobResult | None = None
        self.report_wait = REPORT_WAIT

    # -- the worker's coroutine -----------------------------------------------------------

    async def serve(self, max_jobs: int | None = None, idle_timeout: float | None = None) -> int:
        """Handle jobs until the stop switch is set, ``max_jobs`` are done, the shared budget
        is spent, the pool retires this worker, or no job came for ``idle_timeout`` seconds
        (only then does it reserve with a timeout). Returns the number of jobs.

        With ``config.batch_scheduling`` and a single broker (``config.single_broker``) the
        loop's thread runs under ``SCHED_BATCH`` until this returns (``process/sched.py``).
        """
        self._loop = get_running_loop()
        # An idle worker waits in a plain reserve, unless it must come back: to end after
        # ``idle_timeout``, or with --max-jobs, to hand its ticket back now and then (one
        # waiting on an empty tube would hold it for good, and a job on another tube would
        # wait for ever).
        bounded = idle_timeout is not None or self._budget.limited
        self.reserve_timeout = self.config.reserve_timeout if bounded else None
        done = 0
        self._idle_since = time.monotonic()
        self._observer.broker_busy(self.tube, self.slot, False)
        self.switches.stop.add_callback(self.interrupt)
        batch = self.config.batch_scheduling and self.config.single_broker and batch_thread()
        try:
            # Connect before anything else, even before waiting for a --max-jobs ticket:
            # readiness (READY=1 to systemd) means "every broker is connected".
            await self.connection.client()
            while self._running() and (max_jobs is None or done < max_jobs):
                if self._budget.busy and not self._ticket_held:
                    await self._wait(self._budget.subscribe)  # another broker's may come back
                    continue
                try:
                    # Reserve ahead only when another turn will read the reply.
                    result = await self.handle_one(ahead=max_jobs is None or done + 1 < max_jobs)
                except Stopped:
                    break
                except Exception:
                    # A bug must not end the worker or leave a job half-handled: dropping
                    # the connection makes the server take back whatever we held.
                    self._report_pending()
                    log.exception("%s: unexpected error; reconnecting", self.where)
                    self.connection.drop()
                    await self._wait(timeout=ERROR_PAUSE)
                    continue
                if result is not None:
                    done += 1
                    continue
                if idle_timeout is not None and time.monotonic() - self._idle_since >= idle_timeout:
                    break
                if self._budget.limited:
                    # The ticket went back: let the workers waiting for one have it first.
                    await tools.sleep(0)
        except Stopped:
            pass  # stopped while connecting
        finally:
            self.switches.stop.remove_callback(self.interrupt)
            self.close()
            if batch:
                restore_thread()
        return done

    def _running(self) -> bool:
        return not (self.switches.stop.is_set() or self.retired or self._budget.spent)

    async def handle_one(self, ahead: bool = False) -> JobResult | None:
        """Reserve and handle one job; None when no job came within the reserve timeout
        (or there was nothing to watch, or the reserve was cut short).

        ``ahead``: send the next reserve along with this job's final command, for a caller
        that calls ``handle_one`` again (which then reads its reply). Raises ``Stopped``
        when stopped while (re)connecting.
        """
        self._loop = get_running_loop()
        client = await self.connection.client()
        if self._ticket_held:
            self._ticket_held = False  # taken when the reserve was sent ahead
        elif not self._budget.take():
            return None
        if self._ahead is None and not await self._watch_claimed():
            self._budget.give_back()
            return None
        job = await self._reserve(client)
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
            result = await self._handler.handle(
                client, job, reserved_at, started_at, self._hooks, ahead
            )
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

    async def _reserve(self, client: AsyncClient) -> Job | None:
        """The reserve itself (or the reply of one sent ahead), which ``interrupt`` and
        ``rewatch`` may cut short."""
        reply, self._ahead = self._ahead, None
        if self.switches.stop.is_set() or self.retired or self._rewatch:
            self._rewatch = False
            if reply is not None:
                # Its reply may be a job: the server takes it back with the connection.
                reply.cancel()
                self.connection.drop(planned=True)
            return None
        if reply is None:
            reply = client.reserve(self.reserve_timeout)
        timer = None
        if self._unreported is not None and not reply.done():
            assert self._loop is not None
            timer = self._loop.call_later(self.report_wait, self._report_pending)
        self._in_reserve = True
        job: Job | None = None
        try:
            job = await reply
        except (TimedOut, DeadlineSoon):
            pass  # DEADLINE_SOON cannot happen: we hold no other job
        except CONNECTION_ERRORS as e:
            if not self._interrupted:
                self.connection.drop(e)
        finally:
            self._in_reserve = False
            if timer is not None:
                timer.cancel()
        interrupted, self._interrupted = self._interrupted, False
        if interrupted:
            # Shutdown (or a new watch set) cut the reserve short; a job it may just have
            # reserved went back to the server with the connection, unrun, no release.
            self.connection.drop(planned=True)
            return None
        return job

    # -- the watch set --------------------------------------------------------------------

    def _claim(self) -> tuple[str, ...]:
        self._rewatch = False  # a rewatch asked before this claim is answered by it
        self._claimed = self.plan.claim(self)
        return self._claimed

    async def _watch_claimed(self) -> bool:
        """Claim a watch set and have the connection watch it; False: reserve nothing now
        (nothing may be watched: this waits, with no request, until something changes)."""
        tubes = self._claimed or self._claim()
        if not tubes:
            self._report_pending()
            await self._wait(self.plan.wait_for_change)
            return False
        try:
            await self.connection.set_watch(tubes)
        except CONNECTION_ERRORS as e:
            self.plan.release(self)
            self._claimed = None
            self.connection.drop(e)
            return False
        return True

    def _send_ahead(self, client: AsyncClient) -> None:
        """Send the next reserve right behind this job's final command, holding a ticket
        for it: only when the next watch set is the one the connection has (changing it
        takes watch / ignore commands, which ``handle_one`` sends before its own reserve)."""
        if not self._running() or not self._budget.take():
            return
        tubes = self._claim()
        if not tubes or set(tubes) != set(self.connection.watching):
            self._budget.give_back()
            return
        self._ahead = client.reserve(self.reserve_timeout)
        self._ticket_held = True

    @property
    def reserve_sent_ahead(self) -> bool:
        """A reserve went out with the last job's final command; its reply is unread."""
        return self._ahead is not None

    # -- a job's turns, told by the handler -----------------------------------------------

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

    # -- waiting, and being woken ---------------------------------------------------------

    async def _wait(
        self,
        register: Callable[[Callable[[], None]], float | None] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Wait, with no request, until ``register``'s wake-up is called (it may return a
        timeout of its own), ``timeout`` passes, or ``interrupt`` / ``rewatch``."""
        loop = get_running_loop()
        nudge: Future[None] = loop.create_future()

        def wake() -> None:
            if not nudge.done():
                nudge.set_result(None)

        if register is not None:
            limit = register(wake)
            timeout = limit if timeout is None else timeout
        if not self._running():
            return
        timer = None
        if timeout is not None and not math.isinf(timeout):
            timer = loop.call_later(max(timeout, 0.001), wake)
        self._nudge = nudge
        try:
            await nudge
        finally:
            self._nudge = None
            if timer is not None:
                timer.cancel()

    def _on_loop(self, call: Callable[[], None]) -> bool:
        """False after handing ``call`` to the loop (called from another thread)."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return True
        try:
            if get_running_loop() is loop:
                return True
        except RuntimeError:
            pass
        loop.call_soon_threadsafe(call)
        return False

    def interrupt(self) -> None:
        """Wake a broker waiting in reserve, for a ticket or for the gate, or
        (re)connecting, so it sees it is stopped or retired; a running job is left alone.
        Safe from any thread."""
        if not self._on_loop(self.interrupt):
            return
        if self._in_reserve:
            self._interrupted = True
            self.connection.drop(planned=True)
        elif not self.connection.connected and not self._running():
            self.connection.stop()  # it holds no job: nothing to hand back
        self._wake()

    def rewatch(self) -> None:
        """Make the worker claim its watch set afresh before it reserves (a tube came, went,
        or became servable): a reserve under way is cut short, a running job left alone."""
        if not self._on_loop(self.rewatch):
            return
        if self._in_reserve:
            self._interrupted = True
            self.connection.drop(planned=True)
        else:
            self._rewatch = True
        self._wake()

    def _wake(self) -> None:
        nudge = self._nudge
        if nudge is not None and not nudge.done():
            nudge.set_result(None)

    # -- the end --------------------------------------------------------------------------

    def close(self) -> None:
        """Report what is unreported and close the connection (``serve`` does this itself).

        Closing abandons a reserve sent ahead: the server puts its job back at once, unrun.
        """
        self._report_pending()
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
        self.connection.close()
        self._return_ticket()
        self._job_done()
        self.plan.release(self)
        if self._own_loop is not None:
            loop, self._own_loop = self._own_loop, None
            loop.close()

    def _return_ticket(self) -> None:
        if self._ticket_held:
            self._ticket_held = False
            self._budget.give_back()

    # -- standalone -----------------------------------------------------------------------

    def run(
        self,
        stop_event: threading.Event | None = None,
        max_jobs: int | None = None,
        idle_timeout: float | None = None,
    ) -> int:
        """``serve`` on a loop of the calling thread's own, until ``stop_event`` is set (or
        ``serve`` ends by itself); for tests and standalone use."""
        from cmdstalk_py.supervisor.standalone import serve_standalone

        return serve_standalone([self], stop_event, max_jobs, idle_timeout)[0]

    def run_once(self, prefetch: bool = False) -> JobResult | None:
        """``handle_one`` on this broker's own loop, kept between calls (standalone)."""
        if self._own_loop is None:
            self._own_loop = Loop()
        return self._own_loop.run_until_complete(self.handle_one(prefetch))
