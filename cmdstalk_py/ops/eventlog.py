"""The event log: one JSON object per finished job, appended to a file or stdout, and one
whenever a pool's limited or rated tube is held back or servable again.

The job record layout (schema v4: v2 plus ``peak_memory_bytes``, ``cpu_s`` and ``procs``,
what the command's process tree used; v2 was v1 plus ``pool`` and ``server``, the pool whose
worker ran the job and the ``host:port`` it came from, and ``reason``, ``killed`` and
``progress``) is a contract with the Spark analytics, which read v1, v2 and v4; see README
"Event log". Tube records (``tube_record``) are schema v3, the version that brought records
other than jobs: they carry an ``event`` key, which no job record has, and a reader that
knows only v1 and v2 skips them as another version. Job records skipped 3 for that reason.
``EventLog`` is safe with many broker threads and never holds one up for long: records go
through a bounded queue to one writer thread, each written whole or not at all
(``appendfile``). It is friendly to logrotate: it reopens its path on SIGHUP (a flag set by
the handler, acted on at the next write) and on its own when the file was moved or deleted.
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

from cmdstalk_py.ops.appendfile import AppendFile, write_all
from cmdstalk_py.ops.holdsettle import SETTLE, Change, HoldSettler
from cmdstalk_py.ops.logsetup import iso_utc, json_safe
from cmdstalk_py.ops.observers import Observer, TubeHold
from cmdstalk_py.ops.sinkqueue import SinkQueue
from cmdstalk_py.supervisor.results import JobResult

SCHEMA_VERSION = 4
# The version of records that are not jobs (the ``event`` key tells which).
EVENT_SCHEMA_VERSION = 3
TUBE_HELD = "tube_held"
TUBE_SERVABLE = "tube_servable"
TAIL_BYTES = 4096  # stdout_tail / stderr_tail bound, in UTF-8 bytes
# Records waiting for a stalled sink before new ones are dropped (a record with both tails
# full is about 9 KiB).
QUEUE_BYTES = 4 << 20
# How long close() waits for a sink that does not take the queued records.
LINGER = 2.0

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
    """``result`` as an event-log record, schema v4, keys in contract order.

    v2 added ``pool`` and ``server`` (which worker ran the job, from which server),
    ``reason`` (the rule that decided the outcome), ``killed`` (why the supervisor killed the
    command) and ``progress`` (the command's last progress note). v4 added what the
    command's process tree used: ``peak_memory_bytes``, ``cpu_s`` (user + system) and
    ``procs`` (processes it started; null where not known)."""
    return {
        "schema": SCHEMA_VERSION,
        "start": iso_utc(result.started_at),
        "end": iso_utc(result.ended_at),
        "duration_ms": round(result.duration_ms, 3),
        "hostname": hostname,
        "pid": pid,
        "pool": result.pool,
        "server": result.server,
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
        "reason": result.reason.value if result.reason is not None else None,
        "killed": result.killed.value if result.killed is not None else None,
        "progress": result.progress,
        "peak_memory_bytes": result.peak_memory_bytes,
        "cpu_s": round(result.cpu_s, 3) if result.cpu_s is not None else None,
        "procs": result.procs,
    }


def tube_record(hold: TubeHold, hostname: str, pid: int, at: float) -> dict[str, object]:
    """``hold`` as an event-log record, schema v3, keys in contract order: ``tube_held``
    (``reason`` ``"limit"`` or ``"rate"``) or ``tube_servable`` (``reason`` null), at epoch
    second ``at``. ``rate`` is starts per second; ``limit``, ``rate`` and ``burst`` are null
    for what the tube does not have."""
    return {
        "schema": EVENT_SCHEMA_VERSION,
        "event": TUBE_SERVABLE if hold.reason is None else TUBE_HELD,
        "time": iso_utc(at),
        "hostname": hostname,
        "pid": pid,
        "pool": hold.pool,
        "tube": hold.tube,
        "reason": hold.reason,
        "running": hold.running,
        "limit": hold.limit,
        "rate": hold.rate,
        "burst": hold.burst,
    }


def encode_line(record: dict[str, object]) -> bytes:
    """One record as a ``\\n``-terminated UTF-8 JSON line."""
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    # JSON escapes C0 controls, so the line holds no newline but its last; json_safe
    # escapes what it leaves raw (DEL, C1), for a reader with ``--events -`` on a terminal.
    text = json_safe(text)
    return (text + "\n").encode("utf-8", errors="replace")


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
    write_all(fd, line)


class EventLog(Observer):
    """Appends one JSON line per finished job to ``path`` (``"-"`` for stdout), and one
    per change of a limited or rated tube (``tube_held``).

    Thread-safe; ``job_finished`` and ``tube_held`` never raise and never block: they are
    called on the supervisor's event loop, so records go through a bounded queue to one
    writer thread, and records that do not fit the queue (a stalled sink) are dropped. Every
    record lost (dropped, or a failed write such as a full disk) is counted in
    ``lost_total`` and logged, once per streak, and the file is reopened at the next write.
    """

    def __init__(
        self,
        path: str,
        hostname: str | None = None,
        pid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        limit: int = QUEUE_BYTES,
        settle: float = SETTLE,
    ) -> None:
        import socket

        self.path = path
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self.lost_total = 0
        self._file = AppendFile(path, clock) if path != "-" else None
        self._stdout_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._streak = 0  # records lost since the last one written
        self._closed = False
        self._queue = SinkQueue(self._write_lines, limit, "cmdstalk-event-writer")
        self._clock = clock
        # Under it, a change is settled and queued in one step: a tube's records stay in
        # the order of its changes.
        self._settle_lock = threading.Lock()
        self._settler = HoldSettler(settle)

    def request_reopen(self) -> None:
        """Ask for a reopen at the next write; safe to call from a signal handler."""
        if self._file is not None:
            self._file.request_reopen()

    def reopen(self) -> None:
        """Close and reopen the path now (after logrotate moved the file away).

        Never raises: called from the supervisor's main loop on SIGHUP, where a missing
        directory must not stop the workers. A failure is logged and retried at each write.
        """
        if self._file is None or self._closed:
            return
        try:
            self._file.reopen()
        except OSError as exc:
            log.error("event log %s: cannot reopen: %s", self.path, exc)

    def write_record(self, record: dict[str, object]) -> None:
        """Append one record (already in schema form) now, on this thread; raises OSError
        on failure (nothing of the line is left in the file)."""
        if self._closed:
            raise ValueError("event log is closed")
        self._write_line(encode_line(record))

    def _write_line(self, line: bytes) -> None:
        if self._file is not None:
            self._file.append(line)
            return
        with self._stdout_lock:
            _write_stdout(line)

    def job_finished(self, result: JobResult) -> None:
        """Queue ``result``'s record; losses are counted and logged, never raised."""
        if self._closed:
            return
        self._enqueue(encode_line(event_record(result, self.hostname, self.pid)))

    def tube_held(self, hold: TubeHold) -> None:
        """A tube was held back or became servable: queue its record, or for servable, once
        it has stayed so for ``settle`` seconds (``holdsettle``). The broker that caused
        the change does not wait for the write: nothing it does next depends on it."""
        with self._settle_lock:
            if not self._closed:
                self._queue_changes(self._settler.change(hold, time.time(), self._clock()))

    def heartbeat(self) -> None:
        """Queue the servable records that have settled (called about once a second)."""
        with self._settle_lock:
            if not self._closed:
                self._queue_changes(self._settler.due(self._clock())[0])

    def _queue_changes(self, changes: list[Change]) -> None:
        for change in changes:
            record = tube_record(change.hold, self.hostname, self.pid, change.at)
            self._enqueue(encode_line(record))

    def _enqueue(self, line: bytes) -> None:
        if self._queue.put(line) is None:
            self._lost("the sink is not keeping up (queue full)")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every record queued so far is written (or ``timeout``); False if not.
        Never called on the event loop: for tests and tools that read the file next."""
        return self._queue.flush(timeout)

    def _write_lines(self, lines: list[bytes]) -> None:
        """The writer thread: each record whole or not at all."""
        for line in lines:
            try:
                self._write_line(line)
            except (OSError, ValueError) as exc:
                self._lost(str(exc))
                continue
            if self._streak:
                with self._count_lock:
                    lost, self._streak = self._streak, 0
                log.warning("event log %s: writing again after %d records lost", self.path, lost)

    def _lost(self, why: str) -> None:
        with self._count_lock:
            self.lost_total += 1
            self._streak += 1
            first = self._streak == 1
        if first:  # one error line per failure streak, not one per job
            log.error("event log %s: cannot write records: %s", self.path, why)

    def close(self) -> None:
        """Write what is queued (``LINGER`` seconds at most), close the file (stdout is left
        open). Later records are dropped."""
        with self._settle_lock:  # a tube's last change stands, settled or not
            self._queue_changes(self._settler.flush())
            self._closed = True  # no new records; the queued ones are still written
        # A writer stuck in a write holds the file: leave both to the process's exit.
        if self._queue.close(LINGER) and self._file is not None:
            self._file.close()


def install_sighup_reopen(eventlog: EventLog) -> None:
    """Make SIGHUP reopen ``eventlog`` at its next write (main thread only, like all handlers)."""

    def _on_hup(signum: int, frame: FrameType | None) -> None:
        eventlog.request_reopen()

    signal.signal(signal.SIGHUP, _on_hup)
