"""Starting a command in a new session with its three standard streams on pipes.

``os.posix_spawn`` is used (glibc implements it with ``clone(CLONE_VM|CLONE_VFORK)``, so no
page tables are copied and exec errors come back as an ``OSError``). It was measured
against ``subprocess.Popen(process_group=0)`` (which also uses vfork): see the benchmark
notes in ``benchmarks/drain.py``. Every fd Python creates is close-on-exec (PEP 446), so
only the three pipe ends ``dup2``-ed onto 0, 1 and 2 reach the command.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from cmdstalk_py.process.control import CONTROL_FD
from cmdstalk_py.process.sched import spawn_options

# Signals the command gets with default disposition even if the supervisor ignores them
# (Python itself ignores SIGPIPE and SIGXFSZ; a caller might ignore SIGINT or SIGHUP).
# Handled signals are reset by exec anyway; ignored ones would be inherited.
_DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCHLD,
)


class Spawned(NamedTuple):
    """A started command: its pid (also its process group and session id) and our pipe ends.

    (A named tuple: made once per job, and a frozen dataclass's ``__init__`` costs a call
    per field.)
    """

    pid: int
    stdin: int  # write end
    stdout: int  # read end
    stderr: int  # read end
    control: int = -1  # read end of the control channel (``control.py``); -1: none


def _above_stdio(fds: list[int]) -> None:
    """Move the fds below 3 to 3 or above, so dup2 onto 0-2 cannot clobber a pipe end.

    In place, one at a time: whatever happens, ``fds`` lists exactly the fds open.
    """
    for i, fd in enumerate(fds):
        if fd < 3:
            fds[i] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)


def spawn(argv: Sequence[str], env: Mapping[str, str], control: bool = False) -> Spawned:
    """Start ``argv`` in a new session (its own process group), stdio on fresh pipes.

    With ``control``, the write end of one more pipe is the command's fd 3 (its control
    channel); ours keeps only the read end.

    Raises OSError (e.g. FileNotFoundError) when the program cannot be executed; nothing
    leaks in that case. A program name without ``/`` is looked up in the supervisor's PATH.
    """
    if not argv:
        raise ValueError("empty command")
    fds: list[int] = []
    try:
        in_r, in_w = os.pipe()
        fds += (in_r, in_w)
        out_r, out_w = os.pipe()
        fds += (out_r, out_w)
        err_r, err_w = os.pipe()
        fds += (err_r, err_w)
        if control:
            fds += os.pipe()
        if min(fds) < 3:  # only when the supervisor runs with 0/1/2 closed
            _above_stdio(fds)
        if control and fds[7] == CONTROL_FD:
            # A dup2 onto itself would keep close-on-exec: move the command's end away.
            fds[7] = fcntl.fcntl(CONTROL_FD, fcntl.F_DUPFD_CLOEXEC, CONTROL_FD + 1)
            os.close(CONTROL_FD)
        in_r, in_w, out_r, out_w, err_r, err_w = fds[:6]
        actions = [
            (os.POSIX_SPAWN_DUP2, in_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        if control:
            # Last: fd 3 may be one of the pipe ends above, needed until their dup2.
            actions.append((os.POSIX_SPAWN_DUP2, fds[7], CONTROL_FD))
        launch = os.posix_spawn if "/" in argv[0] else os.posix_spawnp
        pid = launch(
            argv[0],
            list(argv),
            env,
            file_actions=actions,
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
            setsigmask=(),
            **spawn_options(),  # SCHED_OTHER back if this thread runs SCHED_BATCH
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    os.close(in_r)
    os.close(out_w)
    os.close(err_w)
    if not control:
        return Spawned(pid, in_w, out_r, err_r)
    os.close(fds[7])  # the command's end: only the command may hold it
    return Spawned(pid, in_w, out_r, err_r, fds[6])


def describe_spawn_error(exc: BaseException, argv: Sequence[str]) -> str:
    """One line for a command that could not start, e.g. ``No such file or directory: /bin/x``."""
    if not argv:
        return "empty command"
    program = argv[0]
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{os.strerror(exc.errno)}: {program}"
    return f"{exc}: {program}"
