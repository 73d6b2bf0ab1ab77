"""Bounded capture of one output stream: a tail buffer and an optional line splitter.

A command's output is the producer's to choose, and a command writing millions of short
lines must not cost the supervisor a core (every other job would wait for the GIL behind
it): a ``LineBudget`` caps the lines handed on per second, and the lines over it are only
counted, without being split or copied.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LineBudget:
    """At most ``rate`` lines a second, ``burst`` at once (a token bucket), for the line
    callbacks of one command (its stdout and stderr share it); lines over it are dropped,
    counted in ``dropped``, and each drop is told to ``on_drop(lines)``."""

    __slots__ = ("_at", "_clock", "_on_drop", "_tokens", "burst", "dropped", "rate", "short")

    def __init__(
        self,
        rate: float,
        burst: float,
        on_drop: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a line budget needs a rate above 0 and a burst of 1 or more")
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._on_drop = on_drop
        self._tokens = burst
        self._at = clock()
        self.dropped = 0
        self.short = False  # the last take() found no line to spend

    def take(self) -> bool:
        """Spend one line if the budget has one now."""
        now = self._clock()
        tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self.short = tokens < 1
        self._tokens = tokens if self.short else tokens - 1
        return not self.short

    def drop(self, lines: int) -> None:
        self.dropped += lines
        if self._on_drop is not None:
            self._on_drop(lines)


class OutputStream:
    """Keeps the last ``tail_bytes`` of a stream and hands complete lines to ``on_line``.

    Memory stays bounded whatever the command writes: the tail is trimmed as it grows and
    a line longer than ``max_line_bytes`` is emitted in pieces of that size rather than
    buffered whole. Without ``on_line`` no line splitting is done at all (the fast path).
    With a ``budget``, lines (and pieces) over it are counted there instead of handed on.
    """

    __slots__ = (
        "_budget",
        "_max_line",
        "_on_line",
        "_pending",
        "_tail",
        "_tail_bytes",
        "total_bytes",
    )

    def __init__(
        self,
        tail_bytes: int,
        on_line: Callable[[bytes], None] | None = None,
        max_line_bytes: int = 65536,
        budget: LineBudget | None = None,
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._tail_bytes = max(0, tail_bytes)
        self._tail = bytearray()
        self._on_line = on_line
        self._pending = bytearray()
        self._max_line = max_line_bytes
        self._budget = budget
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        """Take the next chunk read from the pipe."""
        self.total_bytes += len(data)
        if self._tail_bytes:
            tail = self._tail
            tail += data
            # Trim only once the buffer is twice the limit: amortised O(1) per byte.
            if len(tail) > 2 * self._tail_bytes:
                del tail[: len(tail) - self._tail_bytes]
        if self._on_line is not None:
            self._split(data)

    def _split(self, data: bytes) -> None:
        pending = self._pending
        start = 0
        newline = data.find(b"\n")
        while newline >= 0:
            if pending:
                pending += data[start:newline]
                self._emit_pending_pieces()
                self._emit(bytes(pending))
                pending.clear()
            else:
                self._emit_long(data, start, newline)
            start = newline + 1
            if self._budget is not None and self._budget.short:
                self._skip(data, start)  # over budget: count the rest, split none of it
                return
            newline = data.find(b"\n", start)
        if start < len(data):
            pending += data[start:]
            self._emit_pending_pieces()

    def _emit(self, line: bytes) -> None:
        budget = self._budget
        if budget is None or budget.take():
            assert self._on_line is not None
            self._on_line(line)
        else:
            budget.drop(1)

    def _skip(self, data: bytes, start: int) -> None:
        """Count the lines ending in ``data[start:]`` as dropped (found in C, never split);
        the unfinished last one stays pending, for the budget to judge when it ends."""
        assert self._budget is not None
        pending = self._pending
        newlines = data.count(b"\n", start)
        if newlines:
            self._budget.drop(newlines)
            pending.clear()  # the start of a line just counted
            start = data.rfind(b"\n") + 1
        pending += data[start:]
        self._emit_pending_pieces()

    def _emit_long(self, data: bytes, start: int, end: int) -> None:
        """Emit ``data[start:end]`` as one line, or in max-size pieces if it is too long."""
        size = self._max_line
        while end - start > size:
            self._emit(data[start : start + size])
            start += size
        self._emit(data[start:end])

    def _emit_pending_pieces(self) -> None:
        """Emit full pieces from an over-long pending line so the buffer stays bounded."""
        pending = self._pending
        size = self._max_line
        while len(pending) > size:
            self._emit(bytes(pending[:size]))
            del pending[:size]

    def finish(self) -> None:
        """End of stream: emit a last line that had no newline."""
        if self._on_line is not None and self._pending:
            self._emit(bytes(self._pending))
            self._pending.clear()

    @property
    def tail(self) -> bytes:
        """The last ``tail_bytes`` bytes seen."""
        if not self._tail_bytes:
            return b""
        return bytes(self._tail[-self._tail_bytes :])
