"""The supervisor's lifecycle: start the dispatcher, watch signals, shut down gracefully.

States, in order (each transition is made in one place, ``_step``)::

    STARTING --brokers connected--> RUNNING --signal / --max-jobs spent--> DRAINING
    DRAINING --all brokers done--> STOPPED

DRAINING: no new reservations; running jobs may finish until their own TTR deadline or
``--shutdown-timeout``, whichever comes first; then their process groups get TERM, grace,
KILL and the jobs are released (a TTR kill while draining releases too, see ``decide``).
A second SIGTERM/SIGINT kills every running command at once and releases its job. SIGHUP
runs ``on_hup`` (reopen the event log) and, with a ``reload`` source (``--config``), reads
the pools again and has the dispatcher switch to them; a source that fails (a bad file)
is logged and the running pools are kept (the file is read off the loop, in the loop's
executor threads). Signal handlers only count signals and wake the main coroutine, which
acts on the counts.

Everything runs on one event loop (``loop.core.Loop``) in the calling thread: the pools'
workers and discovery are its tasks, their commands' pipes and timers its callbacks. Each heartbeat
reports the longest the loop was held between two polls since the last (``looptime``;
``loop_lag`` to the observers, a metrics gauge) and warns past ``LAG_WARN`` seconds.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import signal
import time
from collections.abc import Callable, Iterator, Sequence

from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.ops.holdsettle import HoldLog
from cmdstalk_py.ops.observers import Observer, Observers
from cmdstalk_py.process import reap_orphans
from cmdstalk_py.process.switch import Switch
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.dispatcher import Dispatcher, as_pools
from cmdstalk_py.supervisor.looptime import Alarm, take_lag

log = logging.getLogger("cmdstalk")

HEARTBEAT_INTERVAL = 1.0
# The main coroutine's longest sleep while nothing asks for it (a signal, a stop or reload
# request wakes it at once): bounds how late the heartbeat and the shutdown timeout come.
TICK = 0.25
# While starting, poll faster so READY goes out soon after the brokers connect.
STARTING_TICK = 0.02
#: The loop lag past which the heartbeat warns (seconds).
LAG_WARN = 0.1


class SupervisorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


# Idle and running, the heartbeat is all the main coroutine has to do; starting, it looks
# for readiness often, and draining, for the workers' end.
_TICKS = {SupervisorState.STARTING: STARTING_TICK, SupervisorState.RUNNING: HEARTBEAT_INTERVAL}


class Supervisor:
    """Runs the pools of ``config`` (one Config, or one per pool) until stopped; ``run()``
    returns the exit status (0).

    ``observer`` receives every hook (results, readiness, heartbeats) and is closed at the
    end (beside the supervisor's own, ``holdsettle.HoldLog``). ``on_hup`` runs in the main
    loop after a SIGHUP (e.g. reopen the event log), then ``reload`` (returns the new
    pools, raises to keep the running ones).
    ``reap_orphans``: reap, about once a second, adopted orphans of job commands (daemons a
    job left behind) that have exited. Only for a child subreaper or PID 1, and never in a
    process that also waits for children some other way (``subprocess``, as test runners
    do): it would steal their exit statuses.
    """

    def __init__(
        self,
        config: Config | Sequence[Config],
        observer: Observer | None = None,
        *,
        on_hup: Callable[[], None] | None = None,
        reload: Callable[[], Sequence[Config]] | None = None,
        reap_orphans: bool = False,
    ) -> None:
        self.configs = as_pools(config)
        self.config = config = self.configs[0]
        # Its own observer too: the log lines of tubes held back by a limit or rate.
        self.observer = Observers([HoldLog(), *([observer] if observer is not None else [])])
        self._on_hup = on_hup
        self._reload = reload
        self._reap_orphans = reap_orphans
        self.stop_reserving = Switch()
        self.kill = Switch()
        self.kill_now = Switch()
        self.budget = JobBudget(config.max_jobs)
        self.dispatcher = Dispatcher(
            self.configs,
            self.observer,
            stop=self.stop_reserving,
            kill=self.kill,
            kill_now=self.kill_now,
            budget=self.budget,
        )
        self.state = SupervisorState.STARTING
        # Written by signal handlers and request_stop(); read only by the main loop.
        self._stop_requests = 0
        self._hups = 0
        self._hups_seen = 0
        self._loop: Loop | None = None
        self._alarm: Alarm | None = None  # the main coroutine's sleep
        self._drain_started = 0.0
        self._next_heartbeat = 0.0
        self.loop_lag = 0.0  # the longest hold of the loop in the last heartbeat, seconds

    # -- requests from other threads and from signal handlers -------------------------------

    def request_stop(self) -> None:
        """Same as a SIGTERM: the first call drains, the second kills running commands."""
        self._stop_requests += 1
        self._wake()

    def request_reload(self) -> None:
        """Same as a SIGHUP: ``on_hup``, then the pools read again (from another thread)."""
        self._hups += 1
        self._wake()

    def _wake(self) -> None:
        """Wake the main coroutine (from any thread, or before it runs: nothing to do)."""
        loop, alarm = self._loop, self._alarm
        if loop is None or alarm is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(alarm.poke)

    def _on_signal(self) -> None:
        self._stop_requests += 1  # a flag and a wake-up: the main coroutine acts on it
        self._wake()

    def _on_sighup(self) -> None:
        self._hups += 1
        self._wake()

    # -- the main loop ----------------------------------------------------------------------

    def run(self, install_signals: bool = True) -> int:
        """Serve until stopped, on a new loop in this thread, closed at the end.
        ``install_signals`` needs the main thread."""
        loop = Loop(report=_report)
        try:
            # Tasks still running when main returns (a join that timed out) are cancelled
            # and run to their end before the loop closes.
            return tools.run(self.main(install_signals), loop)
        finally:
            loop.close()

    async def main(self, install_signals: bool = True) -> int:
        """Serve until stopped, on the running loop; the exit status (0)."""
        self._loop = get_running_loop()
        self._alarm = alarm = Alarm()
        take_lag(self._loop)  # what making the pools took is not the loop's lag
        with self._signals(install_signals):
            try:
                self.dispatcher.start()
                while not await self._step(time.monotonic()):
                    await alarm.sleep(_TICKS.get(self.state, TICK))
            finally:
                await self._finish()
        return 0

    def _take_lag(self) -> None:
        """How long the loop was held at most since the last heartbeat: what a command's
        kill point or a job's start may have waited behind (``looptime``)."""
        if self._loop is None:
            return
        self.loop_lag = lag = take_lag(self._loop)
        self.observer.loop_lag(lag)
        if lag > LAG_WARN:
            log.warning(
                "the event loop was held for %.0f ms (kill points and job starts wait "
                "behind it)", lag * 1000,
            )  # fmt: skip

    async def _step(self, now: float) -> bool:
        """One pass of the state machine (every transition is here); True once STOPPED."""
        if self._hups != self._hups_seen:
            self._hups_seen = self._hups
            if self._on_hup is not None:
                self._on_hup()
            if self.state is not SupervisorState.DRAINING:
                await self.reload()
        if self.state is SupervisorState.STARTING and self.dispatcher.ready():
            # STARTING -> RUNNING: every initial broker holds a connection.
            self.state = SupervisorState.RUNNING
            log.info(
                "ready: %d broker(s) connected to %s",
                len(self.dispatcher.brokers()),
                self.config.address,
            )
            self.observer.ready()
        if self.state in (SupervisorState.STARTING, SupervisorState.RUNNING):
            if self._stop_requests:
                # RUNNING -> DRAINING: a signal (or request_stop).
                log.info("stopping: no new jobs; waiting for running jobs")
                self._begin_drain(now)
            elif self.budget.spent:
                # RUNNING -> DRAINING: --max-jobs jobs are done.
                log.info("finished %d jobs (--max-jobs); stopping", self.config.max_jobs)
                self._begin_drain(now)
        if self.state is SupervisorState.DRAINING:
            if self._stop_requests >= 2 and not self.kill_now.is_set():
                log.warning("second stop request: killing running commands")
                self.kill_now.set()
            timeout = self.config.shutdown_timeout
            if (
                timeout is not None
                and not self.kill.is_set()
                and now - self._drain_started >= timeout
            ):
                log.warning("shutdown timeout (%.1fs): stopping running commands", timeout)
                self.kill.set()
            if self.dispatcher.running() == 0:
                # DRAINING -> STOPPED: every broker has handed back its job.
                self.state = SupervisorState.STOPPED
                return True
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + HEARTBEAT_INTERVAL
            self._take_lag()
            if self._reap_orphans:
                # A daemon a job left behind became our child when the job exited; once
                # it exits too, nobody else will ever wait for it.
                reap_orphans()
            self.observer.heartbeat()
        return False

    async def reload(self) -> bool:
        """Read the pools from the ``reload`` source and switch to them (as on SIGHUP);
        False, with the error logged and the running pools kept, when that fails. The
        source is read off the loop (a file: disk I/O and parsing)."""
        if self._reload is None:
            return False
        try:
            configs = await tools.to_thread(self._reload)
            self.dispatcher.reload(configs)
        except Exception as e:  # a bad file: one line, the running config stays
            log.error("reload failed, keeping the running pools: %s", e)
            return False
        self.configs = self.dispatcher.configs
        return True

    def _begin_drain(self, now: float) -> None:
        self.state = SupervisorState.DRAINING
        self._drain_started = now
        self.stop_reserving.set()
        self.dispatcher.interrupt_idle()
        self.observer.stopping()

    async def _finish(self) -> None:
        if self.state is not SupervisorState.STOPPED:  # an exception got us here: stop everything
            self.stop_reserving.set()
            self.kill_now.set()
            self.dispatcher.interrupt_idle()
        await self.dispatcher.join(timeout=10)
        self.state = SupervisorState.STOPPED
        log.info("stopped")
        self.observer.close()

    @contextlib.contextmanager
    def _signals(self, install: bool) -> Iterator[None]:
        if not install:
            yield
            return
        loop = get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_signal)
        loop.add_signal_handler(signal.SIGINT, self._on_signal)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        try:
            yield
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)


def _report() -> None:
    """The loop's report of a callback that raised: logged with its traceback, the loop
    goes on (one worker's bug must not stop the others)."""
    log.exception("error in the event loop")
