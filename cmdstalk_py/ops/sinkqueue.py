"""``SinkQueue``: a bounded queue of byte strings drained by one writer thread.

The shape every sink of the supervisor takes (stderr logging, the event log): brokers put,
one thread writes, and a sink that stalls fills the queue instead of stopping a broker.
``put`` never waits: past ``limit`` bytes it refuses, and the caller counts the loss.
With ``gather``, the writer pauses that long after each write, so what comes meanwhile goes
out in one write: the thread then wakes a few times a second instead of once per item.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SinkQueue:
    """Items put by any thread, handed in order to ``write`` on the queue's own thread.

    ``write`` gets a list of items (every item queued at that moment) and handles its own
    errors. Bytes being written still count against ``limit``, so a sink stuck in one
    write holds at most ``limit`` bytes in memory. ``gather``: seconds the writer waits
    after a write before it takes the next batch (0: at once; for a sink whose items nobody
    waits for, since ``wait_written`` and ``flush`` may take that much longer).
    """

    def __init__(
        self, write: Callable[[list[bytes]], None], limit: int, name: str, gather: float = 0.0
    ) -> None:
        self._write = write
        self._limit = limit
        self._gather = gather
        self._cond = threading.Condition(threading.Lock())
        self._items: list[bytes] = []
        self._bytes = 0  # queued or being written
        self._put_seq = 0  # items accepted so far
        self._done_seq = 0  # items handed to write() and returned from it
        self._closing = False
        self._pausing = False  # the writer lets items gather (``gather``)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, item: bytes, force: bool = False, reserve: int = 0) -> int | None:
        """Queue ``item``; its sequence number, or None when full or closed (never waits).

        ``reserve`` bytes of the limit are kept for other items (bulk items leave room for
        important ones); ``force`` accepts it past the limit (a small notice about losses).
        """
        with self._cond:
            over = self._bytes + len(item) > self._limit - reserve
            if self._closing or (over and not force):
                return None
            self._items.append(item)
            self._bytes += len(item)
            self._put_seq += 1
            if not self._pausing or self._bytes > self._limit // 4:
                self._cond.notify_all()
            return self._put_seq

    def idle(self) -> bool:
        """Nothing queued and nothing being written."""
        with self._cond:
            return self._done_seq == self._put_seq

    def wait_written(self, seq: int, timeout: float) -> bool:
        """Wait until item ``seq`` was written; False if ``timeout`` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._done_seq < seq:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
            return True

    def flush(self, timeout: float) -> bool:
        """Wait until everything put so far was written; False after ``timeout`` seconds."""
        with self._cond:
            seq = self._put_seq
        return self.wait_written(seq, timeout)

    def close(self, timeout: float) -> bool:
        """Refuse new items, write what is queued (``timeout`` seconds at most), stop.

        False when the writer is still busy (a stalled sink): it is a daemon thread, left
        to the process's exit.
        """
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closing:
                    self._cond.wait()
                if not self._items:
                    return
                batch, self._items = self._items, []
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._bytes -= sum(len(item) for item in batch)
                    self._done_seq += len(batch)
                    self._cond.notify_all()
                    if self._gather:
                        self._pause()

    def _pause(self) -> None:
        """Let items gather for ``gather`` seconds (under the lock, which the wait frees).

        Each wakeup of the writer costs the brokers a handoff of the GIL: items put
        meanwhile (usually a line per job) do not wake it, and leave together. A queue
        filled past a quarter of its limit (a command flooding its output) or closing
        wakes it at once.
        """
        if self._closing or self._bytes > self._limit // 4:
            return
        self._pausing = True
        try:
            self._cond.wait(self._gather)
        finally:
            self._pausing = False
