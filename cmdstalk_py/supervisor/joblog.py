"""What a broker says about its jobs in the log: result lines, output lines, kills.

Every line carries the structured extras ``logsetup`` renders as ``[tube:slot] job N``.
Loggers: ``cmdstalk.broker`` for results and kills, ``cmdstalk.output`` for the commands'
stdout and stderr (so output can be silenced or routed apart from the rest).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from cmdstalk_py.ops.eventlog import signal_name
from cmdstalk_py.ops.logsink import OUTPUT_LOGGER
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.process import LineBudget
from cmdstalk_py.supervisor.jobcost import cost_parts
from cmdstalk_py.supervisor.results import JobResult, Outcome, Reason

log = logging.getLogger("cmdstalk.broker")
# Reasons a result line leaves out: the default exit-code rule says nothing new.
_PLAIN = (None, Reason.EXIT_CODE)
output_log = logging.getLogger(OUTPUT_LOGGER)
#: A job may log this many seconds' worth of ``--output-rate`` lines at once.
OUTPUT_BURST_SECONDS = 10
#: While a job's output is over its rate, at most one line says so this often, seconds.
DROP_REPORT_INTERVAL = 10.0


class _Drops:
    """The output lines of one job not logged, reported at once, then at most every
    ``DROP_REPORT_INTERVAL`` while they go on, and the rest when the command ends."""

    __slots__ = ("extra", "rate", "reported_at", "unreported")

    def __init__(self, extra: dict[str, object], rate: int) -> None:
        self.extra, self.rate = extra, rate
        self.unreported = 0
        self.reported_at: float | None = None

    def dropped(self, lines: int) -> None:
        self.unreported += lines
        now = time.monotonic()
        if self.reported_at is None or now - self.reported_at >= DROP_REPORT_INTERVAL:
            self.report(now)

    def report(self, now: float) -> None:
        if self.unreported:
            lines = "1 line" if self.unreported == 1 else f"{self.unreported} lines"
            log.warning("output over %d lines/s: %s not logged", self.rate, lines,
                        extra=self.extra)  # fmt: skip
            self.unreported, self.reported_at = 0, now


def _usage(r: JobResult) -> str:
    """``, 113 MiB peak, 1.17 s CPU, 3 processes``: what the command's tree used, as known."""
    return "".join(", " + part for part in cost_parts(r.peak_memory_bytes, r.cpu_s, r.procs))


class JobLog:
    """The log lines of one broker (``tube``, ``slot``; a shared worker's ``tube`` is the
    tube of its current job, see ``set_tube``)."""

    def __init__(self, tube: str, slot: int, observer: Observer) -> None:
        self.tube = tube
        self.slot = slot
        self._extra: dict[str, object] = {"tube": tube, "slot": slot}
        self._observer = observer
        self._drops: _Drops | None = None  # the running job's (a broker runs one at a time)

    def set_tube(self, tube: str) -> None:
        """The job now starting is of ``tube`` (a shared worker watches several)."""
        if tube != self.tube:
            self.tube = tube
            self._extra = {**self._extra, "tube": tube}

    def extra(self, job_id: int, event: str) -> dict[str, object]:
        """The structured extras of a line about ``job_id``."""
        return {**self._extra, "job_id": job_id, "event": event}

    def result(self, r: JobResult) -> None:
        """One line per finished job: how it ended, what was done, how long it took."""
        level = logging.WARNING if r.outcome is Outcome.LOST else logging.INFO
        if not log.isEnabledFor(level):
            return
        if r.exit_code is not None:
            how = f"exit {r.exit_code}"
        elif r.signal is not None:
            how = f"killed by {signal_name(r.signal)}"
        else:
            how = "not run"
        if r.killed is not None:  # what made us kill it: ttr, max_runtime, shutdown, a limit
            killed = r.killed.value
            how += f" ({killed})" if r.signal is not None else f" (killed: {killed})"
        delay = f" with delay {r.release_delay}s" if r.release_delay is not None else ""
        error = f" ({r.error})" if r.error else ""
        outcome = r.outcome.value
        # The rule is worth a word only where it is not the default one.
        why = f" by {r.reason.value}" if r.reason not in _PLAIN else ""
        msg = f"{how}, {outcome}{why}{delay} in {r.duration_ms:.0f} ms{_usage(r)}{error}"
        # Reported maybe once the next job started: its own tube, not the current one.
        log.log(level, msg, extra={**self.extra(r.job_id, outcome), "tube": r.tube})

    def line_logger(self, job_id: int, stream: str) -> Callable[[bytes], None] | None:
        """A callback logging each output line (and telling an observer that listens for
        lines); None when nobody wants them (then the runner need not split lines)."""
        logged = output_log.isEnabledFor(logging.INFO)
        observed = self._observer.listens("job_output")
        if not logged and not observed:
            return None
        extra = self.extra(job_id, stream)
        prefix = stream + ": "
        tube, slot, observer = self.tube, self.slot, self._observer

        def on_line(line: bytes) -> None:
            if logged:
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                # A finished message and no arguments: logging leaves a ``%`` in output alone.
                output_log.info(prefix + text, extra=extra)
            if observed:
                observer.job_output(tube, slot, job_id, stream, line)

        return on_line

    def output_budget(self, job_id: int, rate: int) -> LineBudget | None:
        """The budget of ``job_id``'s output lines, ``rate`` a second (None: 0, no limit);
        the lines it drops are reported (``output_done`` reports the last of them)."""
        self._drops = None
        if rate <= 0:
            return None
        self._drops = drops = _Drops(self.extra(job_id, "output_dropped"), rate)
        return LineBudget(rate, rate * OUTPUT_BURST_SECONDS, drops.dropped)

    def output_done(self) -> None:
        """The command has ended: report the output lines not reported as dropped yet."""
        drops, self._drops = self._drops, None
        if drops is not None:
            drops.report(time.monotonic())

    def kill_reporter(self, job_id: int) -> Callable[[str], None]:
        """A callback for each signal sent to ``job_id``'s command: logged and observed.

        Called on the kill path: it never raises, and logging never waits for its sink
        (``ops.logsink``), so reporting a signal cannot delay or prevent it.
        """

        def on_kill(name: str) -> None:
            # A reporting bug must not leave a command running.
            with contextlib.suppress(Exception):
                log.warning("sent %s", name, extra=self.extra(job_id, "kill"))
                self._observer.process_killed(self.tube, name)

        return on_kill
