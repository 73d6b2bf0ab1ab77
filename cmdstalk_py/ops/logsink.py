"""``SinkHandler``: a logging handler that never makes its caller wait for the sink.

Brokers log from the thread that runs a job's poll loop, so a write that blocks (stderr on
a pipe nobody reads, a slow journal) would stop that job's TTR kill, and with a shared
handler lock every other broker too. Here a record is formatted by the caller and put on a
bounded queue; one writer thread writes the queue to the descriptor. A line that does not
fit is dropped and counted, and the next line that fits is preceded by a warning saying
how many were lost, so the gap is visible exactly where it happened.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

# What may wait for the sink before lines are dropped: room for bursts of job output
# without letting a stalled sink grow the process.
QUEUE_BYTES = 1 << 20
# How long flushing at exit waits for a sink that does not take the queued lines.
LINGER = 2.0

_NOTICE = "%d log lines dropped: the log sink was not keeping up"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class SinkHandler(logging.Handler):
    """Writes formatted records to ``fd`` from its own thread; ``emit`` never blocks on it.

    ``dropped_total`` counts the lines lost (queue full, or a failed write). ``flush`` and
    ``close`` wait at most ``linger`` seconds for the sink, so a stalled one cannot hold up
    the process's exit.
    """

    def __init__(self, fd: int, limit: int = QUEUE_BYTES, linger: float = LINGER) -> None:
        super().__init__()
        self.fd = fd
        self.dropped_total = 0
        self._limit = limit
        self._linger = linger
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[bytes] = deque()
        self._queued = 0  # bytes queued or being written: the bound covers both
        self._dropped = 0  # dropped since the last notice
        self._closing = False
        self._stalled = False  # a flush gave up waiting: close need not wait again
        self._thread = threading.Thread(target=self._run, name="cmdstalk-log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            self.handleError(record)
            return
        with self._cond:
            if self._closing or self._queued + len(data) > self._limit:
                self._dropped += 1
                self.dropped_total += 1
                return
            if self._dropped:
                self._push(self._notice())
            self._push(data)
            self._cond.notify()

    def _push(self, data: bytes) -> None:
        self._queue.append(data)
        self._queued += len(data)

    def _notice(self) -> bytes:
        """The warning that ``_dropped`` lines were lost (resets the count)."""
        record = logging.LogRecord(
            "cmdstalk.log", logging.WARNING, __file__, 0, _NOTICE, (self._dropped,), None
        )
        self._dropped = 0
        try:
            return (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            return (record.getMessage() + "\n").encode()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                lines = len(self._queue)
                batch = b"".join(self._queue)
                self._queue.clear()
            try:
                _write_all(self.fd, batch)
            except OSError:
                # stderr closed or broken: nowhere to report it. Counted, so a notice
                # follows if the sink takes lines again.
                with self._cond:
                    self._dropped += lines
                    self.dropped_total += lines
            with self._cond:
                self._queued -= len(batch)
                self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every queued line is written, ``linger`` seconds at most."""
        deadline = time.monotonic() + self._linger
        with self._cond:
            while self._queued and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    # logging.shutdown calls close next: one wait for a stalled sink is enough.
                    self._stalled = True
                    return
                self._cond.wait(left)

    def close(self) -> None:
        """Report pending drops, write what is queued (``linger`` at most), stop the writer."""
        with self._cond:
            if not self._closing:
                if self._dropped:
                    self._push(self._notice())
                self._closing = True
                self._cond.notify_all()
        self._thread.join(0.0 if self._stalled else self._linger)
        super().close()
