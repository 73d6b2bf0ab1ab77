"""``SinkHandler``: a logging handler that never makes its caller wait for the sink.

Brokers log from the thread that runs a job's poll loop, so a write that blocks (stderr on
a pipe nobody reads, a slow journal) would stop that job's TTR kill, and with a shared
handler lock every other broker too. Here a record is formatted by the caller and put on a
bounded queue; one writer thread writes the queue to the descriptor. A line that does not
fit is dropped and counted, and the next line that fits is preceded by a warning saying
how many were lost, so the gap is visible exactly where it happened. Job output (the
``cmdstalk.output`` logger) may fill only half the queue: when a job floods its output,
the lines about jobs (results, kills) still get through.
"""

from __future__ import annotations

import logging
import threading

from cmdstalk_py.ops.appendfile import write_all
from cmdstalk_py.ops.sinkqueue import SinkQueue

# What may wait for the sink before lines are dropped: room for bursts of job output
# without letting a stalled sink grow the process.
QUEUE_BYTES = 1 << 20
# How long flushing at exit waits for a sink that does not take the queued lines.
LINGER = 2.0
# How long the writer lets lines gather after a write: one write (and one wakeup of its
# thread) for every line logged meanwhile, at the price of lines reaching the sink that
# much later. Nobody waits for a log line.
GATHER = 0.01

_NOTICE = "%d log lines dropped: the log sink was not keeping up"
# The logger of job commands' output lines: the bulk that must not crowd out the rest.
OUTPUT_LOGGER = "cmdstalk.output"


class SinkHandler(logging.Handler):
    """Writes formatted records to ``fd`` from its own thread; ``emit`` never blocks on it.

    ``dropped_total`` counts the lines lost (queue full, or a failed write). ``flush`` and
    ``close`` wait at most ``linger`` seconds for the sink, so a stalled one cannot hold up
    the process's exit.
    """

    def __init__(
        self, fd: int, limit: int = QUEUE_BYTES, linger: float = LINGER, gather: float = GATHER
    ) -> None:
        super().__init__()
        self.fd = fd
        self.dropped_total = 0
        self._linger = linger
        self._reserve = limit // 2  # kept from output lines for the other lines
        self._count_lock = threading.Lock()
        self._dropped = 0  # dropped since the last notice
        self._stalled = False  # a flush gave up waiting: close need not wait again
        self._queue = SinkQueue(self._write, limit, "cmdstalk-log-writer", gather)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            self.handleError(record)
            return
        # A loss is reported just before the next line that fits, in the same item, so the
        # notice takes no room of its own while the sink is stalled.
        dropped, notice = self._take_notice()
        reserve = self._reserve if record.name == OUTPUT_LOGGER else 0
        if self._queue.put(notice + data, reserve=reserve) is None:
            self._count_dropped(dropped + 1, dropped)

    def _count_dropped(self, lines: int, reported: int = 0) -> None:
        """Count ``lines`` lost, of which ``reported`` were already in ``dropped_total``."""
        with self._count_lock:
            self._dropped += lines
            self.dropped_total += lines - reported

    def _take_notice(self) -> tuple[int, bytes]:
        """The number of lines lost since the last notice, and the notice (b"" if none)."""
        with self._count_lock:
            dropped, self._dropped = self._dropped, 0
        if not dropped:
            return 0, b""
        record = logging.LogRecord(
            "cmdstalk.log", logging.WARNING, __file__, 0, _NOTICE, (dropped,), None
        )
        try:
            return dropped, (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            return dropped, (record.getMessage() + "\n").encode()

    def _write(self, lines: list[bytes]) -> None:
        try:
            write_all(self.fd, b"".join(lines))
        except OSError:
            # stderr closed or broken: nowhere to report it. Counted, so a notice follows
            # if the sink takes lines again.
            self._count_dropped(sum(item.count(b"\n") for item in lines))

    def idle(self) -> bool:
        """Every line accepted so far has been written (or counted as lost)."""
        return self._queue.idle()

    def flush(self) -> None:
        """Wait until every queued line is written, ``linger`` seconds at most."""
        if not self._queue.flush(self._linger):
            # logging.shutdown calls close next: one wait for a stalled sink is enough.
            self._stalled = True

    def close(self) -> None:
        """Report pending drops, write what is queued (``linger`` at most), stop the writer."""
        dropped, notice = self._take_notice()
        if notice and self._queue.put(notice, force=True) is None:
            self._count_dropped(dropped, dropped)
        self._queue.close(0.0 if self._stalled else self._linger)
        super().close()
