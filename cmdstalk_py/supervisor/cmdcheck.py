"""A command that cannot run is a configuration error, not a job's transient failure.

The shell exits 127 when the command is not found and 126 when it is not executable; when
the shell itself is missing nothing starts at all. Every job then fails the same way, so
the job result lines alone (INFO, one per job) hide the cause. ``CommandCheck`` says it
once per broker at ERROR, with a hint; the jobs themselves are handled as any failure
(released with backoff, buried once they reach ``--max-releases``), so fixing the
configuration and kicking the buried jobs runs them.
"""

from __future__ import annotations

import logging

from cmdstalk_py.process import ProcessResult

log = logging.getLogger("cmdstalk.broker")

#: The shell's exit statuses for "not executable" and "not found".
NOT_RUNNABLE = {126: "not executable", 127: "not found"}

HINT = "check --cmd and --shell, PATH, the working directory"


def unrunnable(proc: ProcessResult) -> str | None:
    """Why ``proc`` never ran its command (e.g. ``exit 127: not found``), or None."""
    if proc.spawn_error is not None:
        return f"cannot start: {proc.spawn_error}"
    if proc.exit_code in NOT_RUNNABLE:
        return f"exit {proc.exit_code}: command {NOT_RUNNABLE[proc.exit_code]}"
    return None


class CommandCheck:
    """Reports the first unrunnable command of one broker (``where``, e.g. ``mail:0``)."""

    def __init__(self, where: str, extra: dict[str, object]) -> None:
        self.where = where
        self._extra = extra
        self.reported = False

    def check(self, job_id: int, proc: ProcessResult) -> None:
        """Log an ERROR with a hint the first time a command of this broker cannot run."""
        if self.reported:
            return
        why = unrunnable(proc)
        if why is None:
            return
        self.reported = True
        log.error(
            "the command cannot run (%s): %s. Its jobs are released with backoff and "
            "buried after --max-releases; fix the configuration, then kick them",
            why, HINT, extra={**self._extra, "job_id": job_id, "event": "config_error"},
        )  # fmt: skip
