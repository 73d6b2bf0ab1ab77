"""The value one command run produces: how it ended, what it printed last, what we did to it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeVar

if TYPE_CHECKING:
    import resource


class KillReason(enum.Enum):
    """Why the supervisor killed a command."""

    TTR = "ttr"  # the job's deadline (reservation time + TTR - margin) was reached
    MAX_RUNTIME = "max_runtime"  # the command's own bound (a Lease's deadline) was reached
    SHUTDOWN = "shutdown"  # the supervisor is stopping (stop / stop_now event)
    # Over a limit of its tree (``usage.Limits``, issue #29):
    MEMORY = "memory"  # resident memory
    CPU = "cpu"  # user + system CPU seconds
    PROCS = "procs"  # processes alive at once


#: The kills for a limit of the command's tree.
LIMIT_KILLS = frozenset({KillReason.MEMORY, KillReason.CPU, KillReason.PROCS})


class Usage(NamedTuple):
    """What a run's tree used: peak resident memory (bytes), user + system CPU (seconds)
    and how many processes it started (None where not known: only samples count them).

    (A named tuple: one is made per job.)
    """

    peak_memory: int | None = None
    cpu_s: float | None = None
    procs: int | None = None

    @classmethod
    def from_rusage(cls, ru: resource.struct_rusage | None) -> Usage:
        """The figures of a reaped command (``os.wait4``): its CPU time. Not its peak
        memory: the command was spawned with vfork, and Linux carries the parent's high
        water mark of resident memory over the exec into ``ru_maxrss``, so a supervisor
        of 200 MB would see every command peak at 200 MB or more. The peak comes from
        samples of the tree (``usage.Sampler``) only."""
        if ru is None:
            return cls()
        return cls(None, ru.ru_utime + ru.ru_stime)

    def merge(self, other: Usage) -> Usage:
        """The larger figure of each kind (either source may miss part of the tree)."""
        return Usage(
            _larger(self.peak_memory, other.peak_memory),
            _larger(self.cpu_s, other.cpu_s),
            _larger(self.procs, other.procs),
        )


_N = TypeVar("_N", int, float)


def _larger(a: _N | None, b: _N | None) -> _N | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


#: The figures of a run that has none (not started, or reaped by someone else).
NO_USAGE = Usage()


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and this
# value is made once per job at the moment the next job waits on it.
@dataclass(slots=True)
class ProcessResult:
    """How one command run ended.

    ``exit_code`` is None when the command was ended by a signal (then ``signal`` is set)
    or could not be started (then ``spawn_error`` is set). ``killed`` says whether the
    supervisor killed it and why; ``kill_signals`` lists the signals sent for that, in
    order. ``cleanup_signals`` lists signals sent to leftover members of the command's
    process group after the command itself had exited on its own. ``usage`` is what
    the command's tree used (``usage.py``): figures from its rusage, and from samples of
    the tree when a limit was set.
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
    usage: Usage = NO_USAGE

    @classmethod
    def not_started(cls, spawn_error: str, duration_s: float) -> ProcessResult:
        """The result for a command that could not be started."""
        return cls(None, None, None, duration_s, b"", b"", spawn_error)

    @property
    def succeeded(self) -> bool:
        """The command ran and exited 0 (it may have left children we cleaned up)."""
        return self.exit_code == 0
