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
is logged and the running pools are kept. Signal handlers only count signals; the main
loop, woken through the signal wakeup fd, acts on the count.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

from cmdstalk_py.ops.holdsettle import HoldLog
from cmdstalk_py.ops.observers import Observer, Observers
from cmdstalk_py.process import reap_orphans
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.dispatcher import Dispatcher, as_pools

log = logging.getLogger("cmdstalk")

HEARTBEAT_INTERVAL = 1.0
# The main loop's longest sleep: bounds how late a timer (heartbeat, shutdown timeout) fires.
TICK = 0.25
# While starting, poll faster so READY goes out soon after the brokers connect.
STARTING_TICK = 0.02


class SupervisorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


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
        self.stop_reserving = threading.Event()
        self.kill = threading.Event()
        self.kill_now = threading.Event()
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
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._drain_started = 0.0
        self._next_heartbeat = 0.0

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
        with contextlib.suppress(OSError):  # full buffer: a wake-up is already pending
            self._wake_w.send(b"\0")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_requests += 1  # flag only; the wakeup fd wakes the main loop

    def _on_sighup(self, signum: int, frame: FrameType | None) -> None:
        self._hups += 1

    # -- the main loop ----------------------------------------------------------------------

    def run(self, install_signals: bool = True) -> int:
        """Serve until stopped. ``install_signals`` needs the main thread."""
        with self._signals(install_signals), selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            try:
                self.dispatcher.start()
                while not self._step(time.monotonic()):
                    tick = STARTING_TICK if self.state is SupervisorState.STARTING else TICK
                    if sel.select(tick):
                        self._drain_wakeups()
            finally:
                self._finish()
        return 0

    def _step(self, now: float) -> bool:
        """One pass of the state machine (every transition is here); True once STOPPED."""
        if self._hups != self._hups_seen:
            self._hups_seen = self._hups
            if self._on_hup is not None:
                self._on_hup()
            if self.state is not SupervisorState.DRAINING:
                self.reload()
        if self.state is SupervisorState.STARTING and self.dispatcher.ready():
            # STARTING -> RUNNING: every initial broker holds a connection.
            self.state = SupervisorState.RUNNING
            log.info("ready: %d broker(s) connected to %s", len(self.dispatcher.brokers()),
                     self.config.address)
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
            if self._reap_orphans:
                # A daemon a job left behind became our child when the job exited; once
                # it exits too, nobody else will ever wait for it.
                reap_orphans()
            self.observer.heartbeat()
        return False

    def reload(self) -> bool:
        """Read the pools from the ``reload`` source and switch to them (as on SIGHUP);
        False, with the error logged and the running pools kept, when that fails."""
        if self._reload is None:
            return False
        try:
            configs = self._reload()
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

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass

    def _finish(self) -> None:
        if self.state is not SupervisorState.STOPPED:  # an exception got us here: stop everything
            self.stop_reserving.set()
            self.kill_now.set()
            self.dispatcher.interrupt_idle()
        self.dispatcher.join(timeout=10)
        self.state = SupervisorState.STOPPED
        log.info("stopped")
        self.observer.close()
        self._wake_r.close()
        self._wake_w.close()

    @contextlib.contextmanager
    def _signals(self, install: bool) -> Iterator[None]:
        if not install:
            yield
            return
        old = {
            signal.SIGTERM: signal.signal(signal.SIGTERM, self._on_signal),
            signal.SIGINT: signal.signal(signal.SIGINT, self._on_signal),
            signal.SIGHUP: signal.signal(signal.SIGHUP, self._on_sighup),
        }
        old_fd = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        try:
            yield
        finally:
            signal.set_wakeup_fd(old_fd)
            for signum, handler in old.items():
                signal.signal(signum, handler)
