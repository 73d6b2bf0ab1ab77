"""The value one command run produces: how it ended, what it printed last, what we did to it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class KillReason(enum.Enum):
    """Why the supervisor killed a command."""

    TTR = "ttr"  # the job's deadline (reservation time + TTR - margin) was reached
    MAX_RUNTIME = "max_runtime"  # the command's own bound (a Lease's deadline) was reached
    SHUTDOWN = "shutdown"  # the supervisor is stopping (stop / stop_now event)


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and this
# value is made once per job at the moment the next job waits on it.
@dataclass(slots=True)
class ProcessResult:
    """How one command run ended.

    ``exit_code`` is None when the command was ended by a signal (then ``signal`` is set)
    or could not be started (then ``spawn_error`` is set). ``killed`` says whether the
    supervisor killed it and why; ``kill_signals`` lists the signals sent for that, in
    order. ``cleanup_signals`` lists signals sent to leftover members of the command's
    process group after the command itself had exited on its own.
    """

    exit_code: int | None
    signal: int | None
    killed: KillReason | None
    duration_s: float
    stdout_tail: bytes
    stderr_tail: bytes
    spawn_error: str | None
    kill_signals: tuple[str, ...] = ()
    cleanup_signals: tuple[str, ...] = ()

    @classmethod
    def not_started(cls, spawn_error: str, duration_s: float) -> ProcessResult:
        """The result for a command that could not be started."""
        return cls(None, None, None, duration_s, b"", b"", spawn_error)

    @property
    def succeeded(self) -> bool:
        """The command ran and exited 0 (it may have left children we cleaned up)."""
        return self.exit_code == 0
