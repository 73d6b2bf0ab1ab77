"""Observer hooks: how the supervisor tells logs, the event log and metrics what happened.

The supervisor calls these from broker threads; implementations must be thread-safe and
must not raise (a broken metrics exporter must never lose a job). ``Observer`` is a base
class with no-op methods so implementations override only what they need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cmdstalk_py.supervisor.results import JobResult


@dataclass(frozen=True, slots=True)
class JobStart:
    """A job whose command has just started, as ``Observer.job_started`` reports it."""

    pool: str
    worker: str  # the broker's label, as broker_busy names it: a tube, or a pool's name
    slot: int
    tube: str  # the job's own tube (a shared worker watches several)
    job_id: int
    pid: int
    ttr: int
    started_at: float  # epoch seconds
    # What the command runs against (``Config.run_limit``): seconds, and "ttr" or
    # "max_runtime"; None for --keep-alive without --max-runtime (nothing bounds it).
    limit: float | None
    limit_kind: str | None
    server: str | None = None  # host:port the job came from


@dataclass(frozen=True, slots=True)
class TubeHold:
    """A limited or rated tube of a pool held back or servable again, as
    ``Observer.tube_held`` reports it (only on a change, never per job)."""

    pool: str
    tube: str
    reason: str | None  # "limit" / "rate": its jobs stay queued; None: servable again
    running: int  # its jobs running in the pool at the change
    limit: int | None  # --tube-limit, running jobs at most
    rate: float | None  # --tube-rate, starts per second
    burst: float | None  # the rate's burst, starts at once


class Observer:
    """No-op observer; subclass and override what you need."""

    def job_finished(self, result: JobResult) -> None:
        """A job reached its final outcome for this reservation."""

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        """A broker started (busy=True) or stopped (busy=False) running a job."""

    def job_started(self, start: JobStart) -> None:
        """A job's command is running as process ``start.pid``. It ends with
        ``broker_busy(start.worker, start.slot, False)``."""

    def job_output(self, tube: str, slot: int, job_id: int, stream: str, line: bytes) -> None:
        """A line (without its newline) the running job wrote on ``stream`` ("stdout" or
        "stderr"). Brokers split output into lines only for an observer that
        ``listens("job_output")``."""

    def reserve_waited(self, tube: str, seconds: float) -> None:
        """Time a broker spent in reserve before it got a job."""

    def reconnected(self, where: str, address: str) -> None:
        """A broker (``where`` = tube:slot) or the dispatcher reconnected."""

    def process_killed(self, tube: str, signal_name: str) -> None:
        """The supervisor sent ``signal_name`` (SIGTERM/SIGKILL) to a job's process group."""

    def tube_running(self, pool: str, tube: str, running: int, limit: int | None) -> None:
        """Jobs of a tube with a limit or rate running in ``pool`` (at each start and end)."""

    def tube_held(self, hold: TubeHold) -> None:
        """A limited or rated tube of ``hold.pool`` is held back (``hold.reason`` is
        ``"limit"`` / ``"rate"``: its jobs stay queued) or servable again (None)."""

    def ready(self) -> None:
        """All initial brokers are connected (systemd READY=1)."""

    def stopping(self) -> None:
        """Shutdown began (systemd STOPPING=1)."""

    def heartbeat(self) -> None:
        """Called periodically (about once a second) while the supervisor is healthy."""

    def loop_lag(self, seconds: float) -> None:
        """The longest the event loop was held between two polls lately (twice a second)."""

    def close(self) -> None:
        """The supervisor has stopped; flush and release resources."""

    def listens(self, hook: str) -> bool:
        """This observer implements ``hook`` (so a caller may skip costly work otherwise)."""
        return getattr(type(self), hook, None) is not getattr(Observer, hook)


# Every hook, as Observers fans them out.
_HOOKS = tuple(
    name
    for name, value in vars(Observer).items()
    if callable(value) and not name.startswith("_") and name != "listens"
)


class Observers(Observer):
    """Fans every call out to several observers; one failing never stops the others.

    A hook calls only the observers that implement it (resolved when they are added):
    brokers call several hooks per job, and most observers implement one or two.
    """

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._observers: list[Observer] = []
        self._hooks: dict[str, list[Callable[..., None]]] = {name: [] for name in _HOOKS}
        for observer in observers:
            self.add(observer)

    def add(self, observer: Observer) -> None:
        self._observers.append(observer)
        for name in _HOOKS:
            hook = getattr(observer, name)
            if getattr(hook, "__func__", None) is not getattr(Observer, name):
                self._hooks[name].append(hook)

    def _each(self, name: str, *args: object) -> None:
        for hook in self._hooks[name]:
            try:
                hook(*args)
            except Exception:  # an observer's bug must never lose a job
                import logging

                logging.getLogger("cmdstalk").exception(
                    "observer %r failed in %s", getattr(hook, "__self__", hook), name
                )

    # The per-job hooks (four calls per job) look before calling _each: without a metrics
    # endpoint or an event log nobody listens, and a broker need not pay for the call.

    def job_finished(self, result: JobResult) -> None:
        if self._hooks["job_finished"]:
            self._each("job_finished", result)

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        if self._hooks["broker_busy"]:
            self._each("broker_busy", tube, slot, busy)

    def reserve_waited(self, tube: str, seconds: float) -> None:
        if self._hooks["reserve_waited"]:
            self._each("reserve_waited", tube, seconds)

    def job_started(self, start: JobStart) -> None:
        if self._hooks["job_started"]:
            self._each("job_started", start)

    def job_output(self, tube: str, slot: int, job_id: int, stream: str, line: bytes) -> None:
        if self._hooks["job_output"]:
            self._each("job_output", tube, slot, job_id, stream, line)

    def listens(self, hook: str) -> bool:
        # Asked of each observer: one that is itself an ``Observers`` implements every hook
        # but may have nobody behind one.
        return any(observer.listens(hook) for observer in self._observers)

    def reconnected(self, where: str, address: str) -> None:
        self._each("reconnected", where, address)

    def tube_running(self, pool: str, tube: str, running: int, limit: int | None) -> None:
        if self._hooks["tube_running"]:
            self._each("tube_running", pool, tube, running, limit)

    def tube_held(self, hold: TubeHold) -> None:
        self._each("tube_held", hold)

    def process_killed(self, tube: str, signal_name: str) -> None:
        self._each("process_killed", tube, signal_name)

    def ready(self) -> None:
        self._each("ready")

    def stopping(self) -> None:
        self._each("stopping")

    def heartbeat(self) -> None:
        self._each("heartbeat")

    def loop_lag(self, seconds: float) -> None:
        if self._hooks["loop_lag"]:
            self._each("loop_lag", seconds)

    def close(self) -> None:
        self._each("close")
