"""What a broker says about its jobs in the log: result lines, output lines, kills.

Every line carries the structured extras ``logsetup`` renders as ``[tube:slot] job N``.
Loggers: ``cmdstalk.broker`` for results and kills, ``cmdstalk.output`` for the commands'
stdout and stderr (so output can be silenced or routed apart from the rest).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from cmdstalk_py.ops.eventlog import signal_name
from cmdstalk_py.ops.logsink import OUTPUT_LOGGER
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.results import JobResult, Outcome, Reason

log = logging.getLogger("cmdstalk.broker")
# Reasons a result line leaves out: the default exit-code rule says nothing new.
_PLAIN = (None, Reason.EXIT_CODE)
output_log = logging.getLogger(OUTPUT_LOGGER)


class JobLog:
    """The log lines of one broker (``tube``, ``slot``; a shared worker's ``tube`` is the
    tube of its current job, see ``set_tube``)."""

    def __init__(self, tube: str, slot: int, observer: Observer) -> None:
        self.tube = tube
        self.slot = slot
        self._extra: dict[str, object] = {"tube": tube, "slot": slot}
        self._observer = observer

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
        if r.killed is not None:  # what made us kill it: ttr, max_runtime, shutdown
            killed = r.killed.value
            how += f" ({killed})" if r.signal is not None else f" (killed: {killed})"
        delay = f" with delay {r.release_delay}s" if r.release_delay is not None else ""
        error = f" ({r.error})" if r.error else ""
        outcome = r.outcome.value
        # The rule is worth a word only where it is not the default one.
        why = f" by {r.reason.value}" if r.reason not in _PLAIN else ""
        msg = f"{how}, {outcome}{why}{delay} in {r.duration_ms:.0f} ms{error}"
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
