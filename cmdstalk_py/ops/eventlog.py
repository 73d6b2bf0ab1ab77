"""The per-job event log: one JSON object per finished job, appended to a file or stdout.

The record layout (schema v1) is a contract with the Spark analytics; see README "Event log".
``EventLog`` is safe with many broker threads (one ``write(2)`` per line, under a lock, on an
``O_APPEND`` descriptor) and friendly to logrotate: it reopens its path on SIGHUP (a flag set
by the handler, acted on at the next write) and on its own when the file was moved or deleted.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from cmdstalk_py.ops.logsetup import iso_utc
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.results import JobResult

SCHEMA_VERSION = 1
TAIL_BYTES = 4096  # stdout_tail / stderr_tail bound, in UTF-8 bytes
# How often a write may stat() the path to notice rotation; a stat per job would be cheap
# too, but a busy pool finishes hundreds of jobs a second and gains nothing from it.
CHECK_INTERVAL = 1.0

log = logging.getLogger("cmdstalk.events")


def signal_name(signum: int | None) -> str | None:
    """``9`` → ``"SIGKILL"``; numbers Python has no name for stay numeric (``"SIG64"``)."""
    if signum is None:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def bounded_tail(text: str, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` UTF-8 bytes of ``text``, never starting mid-character.

    Lone surrogates (from a surrogateescape decode) become ``?`` so the line is valid UTF-8.
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    # The cut may split a multi-byte character; dropping its continuation bytes is right.
    return data[-limit:].decode("utf-8", errors="ignore")


def event_record(result: JobResult, hostname: str, pid: int) -> dict[str, object]:
    """``result`` as an event-log record, schema v1, keys in contract order."""
    return {
        "schema": SCHEMA_VERSION,
        "start": iso_utc(result.started_at),
        "end": iso_utc(result.ended_at),
        "duration_ms": round(result.duration_ms, 3),
        "hostname": hostname,
        "pid": pid,
        "tube": result.tube,
        "slot": result.slot,
        "job_id": result.job_id,
        "priority": result.priority,
        "ttr": result.ttr,
        "releases": result.releases,
        "timeouts": result.timeouts,
        "reserves": result.reserves,
        "age_s": result.age_s,
        "payload_bytes": result.payload_bytes,
        "outcome": result.outcome.value,
        "exit_code": result.exit_code,
        "signal": signal_name(result.signal),
        "release_delay": result.release_delay,
        "stdout_tail": bounded_tail(result.stdout_tail),
        "stderr_tail": bounded_tail(result.stderr_tail),
        "error": result.error,
    }


def encode_line(record: dict[str, object]) -> bytes:
    """One record as a ``\\n``-terminated UTF-8 JSON line."""
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    # JSON escapes every control character, so the line holds no newline but its last.
    return (text + "\n").encode("utf-8", errors="replace")


def _write_all(fd: int, data: bytes) -> None:
    # O_APPEND writes to a regular file are complete in one call; a pipe or terminal on
    # stdout may take less, and the rest must follow before anyone else writes.
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_stdout(line: bytes) -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        # stdout replaced by something without a descriptor (an embedding app, a test's
        # capture): write through it instead.
        sys.stdout.write(line.decode("utf-8"))
        sys.stdout.flush()
        return
    sys.stdout.flush()  # anything print()ed earlier goes first
    _write_all(fd, line)


class EventLog(Observer):
    """Appends one JSON line per finished job to ``path`` (``"-"`` for stdout).

    Thread-safe; never raises from ``job_finished`` (a full disk loses event lines, not jobs:
    the failure is logged and the file is reopened at the next write).
    """

    def __init__(
        self,
        path: str,
        hostname: str | None = None,
        pid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import socket

        self.path = path
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._closed = False
        # Set from a signal handler: a plain attribute store, no lock (the handler may run
        # while this very thread holds the lock).
        self._reopen_requested = False
        self._next_check = 0.0
        self._failed = False
        if path != "-":
            self._fd = self._open()
            self._next_check = self._clock() + CHECK_INTERVAL

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        return os.open(self.path, flags, 0o644)

    def request_reopen(self) -> None:
        """Ask for a reopen at the next write; safe to call from a signal handler."""
        self._reopen_requested = True

    def reopen(self) -> None:
        """Close and reopen the path now (after logrotate moved the file away).

        Never raises: called from the supervisor's main loop on SIGHUP, where a missing
        directory must not stop the workers. A failure is logged and retried at each write.
        """
        with self._lock:
            try:
                self._reopen_locked()
            except OSError as exc:
                log.error("event log %s: cannot reopen: %s", self.path, exc)
                self._failed = True

    def _reopen_locked(self) -> None:
        self._reopen_requested = False
        if self.path == "-" or self._closed:
            return
        new_fd = self._open()
        old, self._fd = self._fd, new_fd
        if old is not None:
            os.close(old)
        self._next_check = self._clock() + CHECK_INTERVAL

    def _rotated_locked(self) -> bool:
        """Whether the path no longer names the open file (moved, deleted or replaced)."""
        if self._fd is None:
            return True
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return True
        mine = os.fstat(self._fd)
        return (on_disk.st_ino, on_disk.st_dev) != (mine.st_ino, mine.st_dev)

    def _target_locked(self) -> int:
        """The descriptor to write to, reopening first when asked to or after rotation."""
        if self._reopen_requested:
            self._reopen_locked()
        elif self._failed or self._clock() >= self._next_check:
            self._next_check = self._clock() + CHECK_INTERVAL
            if self._rotated_locked():
                self._reopen_locked()
        assert self._fd is not None
        return self._fd

    def write_record(self, record: dict[str, object]) -> None:
        """Append one record (already in schema form) as a line; raises OSError on failure."""
        line = encode_line(record)
        with self._lock:
            if self._closed:
                raise ValueError("event log is closed")
            if self.path == "-":
                _write_stdout(line)
            else:
                _write_all(self._target_locked(), line)

    def job_finished(self, result: JobResult) -> None:
        """Append ``result``'s record; failures are logged, never raised."""
        try:
            self.write_record(event_record(result, self.hostname, self.pid))
            self._failed = False
        except (OSError, ValueError) as exc:
            if not self._failed:  # one error line per failure streak, not one per job
                log.error("event log %s: cannot write job %s: %s", self.path, result.job_id, exc)
            self._failed = True

    def close(self) -> None:
        """Close the file (stdout is left open). Later records are dropped."""
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def install_sighup_reopen(eventlog: EventLog) -> None:
    """Make SIGHUP reopen ``eventlog`` at its next write (main thread only, like all handlers)."""

    def _on_hup(signum: int, frame: FrameType | None) -> None:
        eventlog.request_reopen()

    signal.signal(signal.SIGHUP, _on_hup)
