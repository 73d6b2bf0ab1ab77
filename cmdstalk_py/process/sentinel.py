"""The sentinel: a small process that kills the running commands if the supervisor dies.

Commands run in their own sessions, so nothing the kernel does when the supervisor is
killed with SIGKILL reaches them: they would run on unsupervised while the queue server
releases their jobs, and a restarted supervisor would run each job a second time,
concurrently. ``start_sentinel`` starts a Python process running ``main`` below in a
session of its own (so a signal to the supervisor's process group does not take it too),
with the read end of a pipe on its stdin. ``run_command`` tells it, one short line each,
which runs are going on:

    +TOKEN        a command with run marker TOKEN is about to start
    =TOKEN PID    ... it started as PID (its process group)
    -TOKEN        ... it is over, its leftovers killed

When the pipe reaches end of file (the supervisor is gone, however it ended) the sentinel
sends SIGTERM to every process of the runs still going on (members of their process groups
and every process carrying their marker), SIGKILL to what is left after the grace period,
and exits. A clean shutdown leaves no run going on, so the sentinel just exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator

from cmdstalk_py.process.marker import MARKER, environ_token

log = logging.getLogger("cmdstalk")

_fd = -1  # the supervisor's end of the pipe; -1: no sentinel
_dropping = False  # the pipe was full at the last write
# Not ``-m``: this package imports this module, and runpy warns about running it twice.
_MAIN = "import sys; from cmdstalk_py.process.sentinel import main; sys.exit(main(sys.argv[1:]))"
# After SIGKILL, how long the sentinel keeps looking for stragglers.
_KILL_SETTLE = 2.0
_CHECK_INTERVAL = 0.02
# How often the sentinel reads what the supervisor told it (and so how soon after the
# supervisor's death it acts), and the pipe size that holds what comes in meanwhile.
_BATCH = 0.1
_PIPE_SIZE = 1 << 20


# -- the supervisor's side -------------------------------------------------------------


def start_sentinel(grace: float) -> int | None:
    """Start the sentinel for this process; return its pid (None if it could not start).

    Process-wide: call once at startup. ``grace`` is the SIGTERM -> SIGKILL delay it uses.
    """
    global _fd
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-c", _MAIN, str(os.getpid()), str(grace)]
    try:
        pid = os.posix_spawn(
            sys.executable,
            argv,
            {k: v for k, v in os.environ.items() if k != MARKER},
            file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0)],
            setsid=True,
        )
    except OSError as e:
        os.close(read_end)
        os.close(write_end)
        log.warning("no sentinel (commands will outlive a killed supervisor): %s", e)
        return None
    os.close(read_end)
    with contextlib.suppress(OSError):  # above /proc/sys/fs/pipe-max-size: keep 64 KiB
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    # A stopped or wedged sentinel must not stall the brokers: a line that does not fit
    # is dropped (that run is then unguarded) rather than waited for.
    os.set_blocking(write_end, False)
    _fd = write_end
    return pid


def tell_sentinel(line: str) -> None:
    """Send one protocol line (no newline) to the sentinel, if there is one."""
    global _fd, _dropping
    fd = _fd
    if fd < 0:
        return
    try:
        os.write(fd, line.encode("ascii") + b"\n")
    except BlockingIOError:
        if not _dropping:  # once per episode, not once per line
            log.warning("sentinel not reading: runs started now are not guarded")
        _dropping = True
        return
    except OSError as e:  # BrokenPipeError: someone killed it
        # Left open: another broker thread may be writing to this fd number right now,
        # and once closed the number could name a file or socket opened meanwhile.
        _fd = -1
        log.warning("sentinel gone (commands will outlive a killed supervisor): %s", e)
        return
    _dropping = False


# -- the sentinel's side ---------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid`` from /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2])


def _targets(runs: dict[str, int | None]) -> set[int]:
    """Live processes of ``runs``: in one of their process groups or carrying their marker."""
    groups = {pid for pid in runs.values() if pid is not None}
    me = os.getpid()
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (me, 1):
            continue
        pid = int(name)
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        if stat[1] in groups or environ_token(pid) in runs:
            found.add(pid)
    return found


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


def kill_runs(runs: dict[str, int | None], grace: float) -> int:
    """TERM every process of ``runs``, KILL what is left after ``grace``; return how many
    processes were found. Rescans as it waits: a process may fork or ``setsid`` on TERM."""
    hit = _targets(runs)
    if not hit:
        return 0
    _signal_all(hit, signal.SIGTERM)
    kill_at = time.monotonic() + grace
    # TERM SENT -> KILL SENT -> gone (or given up after _KILL_SETTLE)
    sig = signal.SIGTERM
    give_up = kill_at + _KILL_SETTLE
    while time.monotonic() < give_up:
        time.sleep(_CHECK_INTERVAL)
        left = _targets(runs)
        if not left:
            break
        if sig is signal.SIGTERM and time.monotonic() >= kill_at:
            sig = signal.SIGKILL
            _signal_all(left, sig)
        else:
            _signal_all(left - hit, sig)
        hit |= left
    return len(hit)


def _chunks(fd: int) -> Iterator[bytes]:
    """What the supervisor wrote, in batches, until end of file.

    Only the state at end of file matters, so the sentinel need not keep up line by line:
    it wakes at most every ``_BATCH`` seconds instead of once per line, which would cost
    the supervisor a context switch per job. The pipe is large enough to hold a batch.
    """
    while chunk := os.read(fd, _PIPE_SIZE):
        yield chunk
        time.sleep(_BATCH)


def _read_runs(chunks: Iterable[bytes]) -> dict[str, int | None]:
    """Follow the protocol until end of file; return the runs still going on."""
    runs: dict[str, int | None] = {}
    partial = b""
    for chunk in chunks:
        *lines, partial = (partial + chunk).split(b"\n")
        for raw in lines:
            _apply(runs, raw.decode("ascii", "replace"))
    return runs


def _apply(runs: dict[str, int | None], line: str) -> None:
    if line.startswith("+"):
        runs[line[1:]] = None
    elif line.startswith("="):
        token, _, pid = line[1:].partition(" ")
        if token in runs and pid.isdigit():
            runs[token] = int(pid)
    elif line.startswith("-"):
        runs.pop(line[1:], None)


def main(argv: list[str]) -> int:
    """The sentinel process: ``main([SUPERVISOR_PID, GRACE])``, with the pipe on stdin."""
    supervisor, grace = int(argv[0]), float(argv[1])
    # Outlive whatever signal ends the supervisor's group or terminal: our job starts when
    # the supervisor is gone, and ends by itself when the pipe closes.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    runs = _read_runs(_chunks(sys.stdin.fileno()))
    if runs:
        count = kill_runs(runs, grace)
        print(
            f"cmdstalk sentinel: supervisor {supervisor} is gone; "
            f"killed {count} processes of {len(runs)} running commands",
            file=sys.stderr,
            flush=True,
        )
    return 0
