"""Bounded capture of one output stream: a tail buffer and an optional line splitter.

A command's output is the producer's to choose, and a command writing millions of short
lines must not cost the supervisor a core (every other job would wait for the GIL behind
it): a ``LineBudget`` caps the lines handed on per second, and the lines over it are only
counted, without being split or copied. Nor may one chunk's lines hold the loop that
reads it: they are handed on a bounded number at a time (``LINES_PER_TURN``), the loop
polling in between.
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


#: Lines (and pieces of an over-long line) handed on or counted one by one per call of
#: ``feed`` or ``more``: the most a chunk holds its caller's loop before the loop polls again.
LINES_PER_TURN = 256


class OutputStream:
    """Keeps the last ``tail_bytes`` of a stream and hands complete lines to ``on_line``.

    Memory stays bounded whatever the command writes: the tail is trimmed as it grows and
    a line longer than ``max_line_bytes`` is emitted in pieces of that size rather than
    buffered whole. Without ``on_line`` no line splitting is done at all (the fast path).
    With a ``budget``, lines (and pieces) over it are counted there instead of handed on.

    A chunk's lines go out ``turn`` at a time: ``feed`` hands on the first ones, each
    ``more`` the next, until the chunk is all taken (``busy`` until then). A 64 KiB read
    holds up to 32,768 lines, and a loop handing them all on at once would wait that long
    to poll its other pipes and timers; between turns it polls.
    """

    __slots__ = (
        "_at",
        "_budget",
        "_chunk",
        "_max_line",
        "_newline",
        "_on_line",
        "_pending",
        "_tail",
        "_tail_bytes",
        "_turn",
        "total_bytes",
    )

    def __init__(
        self,
        tail_bytes: int,
        on_line: Callable[[bytes], None] | None = None,
        max_line_bytes: int = 65536,
        budget: LineBudget | None = None,
        turn: int = LINES_PER_TURN,
    ) -> None:
        if max_line_bytes < 1 or turn < 1:
            raise ValueError("max_line_bytes and turn must be at least 1")
        self._tail_bytes = max(0, tail_bytes)
        self._tail = bytearray()
        self._on_line = on_line
        self._pending = bytearray()  # the start of a line whose end is not read yet
        self._max_line = max_line_bytes
        self._budget = budget
        self._turn = turn
        self._chunk = b""  # the chunk being split: its lines from _at on are left
        self._at = 0
        self._newline = -1  # the chunk's next newline (its length: none), if not behind _at
        self.total_bytes = 0

    @property
    def busy(self) -> bool:
        """Lines of the last chunk are left for ``more``."""
        return self._at < len(self._chunk)

    def feed(self, data: bytes) -> bool:
        """Take the next chunk read from the pipe and hand on its first lines; False when
        some are left for ``more`` (no ``feed`` until they are taken)."""
        if self.busy:
            raise RuntimeError("feed() while the last chunk's lines are left for more()")
        self.total_bytes += len(data)
        if self._tail_bytes:
            tail = self._tail
            tail += data
            # Trim only once the buffer is twice the limit: amortised O(1) per byte.
            if len(tail) > 2 * self._tail_bytes:
                del tail[: len(tail) - self._tail_bytes]
        if self._on_line is None:
            return True
        self._chunk, self._at, self._newline = data, 0, -1
        return self.more()

    def more(self) -> bool:
        """Hand on (or count) the chunk's next ``turn`` lines; True once it is all taken."""
        left = self._turn
        while left and self._at < len(self._chunk):
            left -= self._step()
        if self.busy:
            return False
        self._chunk, self._at = b"", 0
        return True

    def _step(self) -> int:
        """The next line or piece of the chunk (1), or the start of a line to keep (0)."""
        data, at, pending = self._chunk, self._at, self._pending
        room = self._max_line - len(pending)
        newline = self._newline
        if newline < at:  # found once per line, not once per piece of a long one
            newline = data.find(b"\n", at)
            self._newline = newline = len(data) if newline < 0 else newline
        if newline < len(data) and newline - at <= room:
            self._at = newline + 1
            if pending:
                pending += data[at:newline]
                self._emit(bytes(pending))
                pending.clear()
            else:
                self._emit(data[at:newline])
            if self._budget is not None and self._budget.short:
                self._skip()
        elif newline - at > room:  # too long: the next piece, of max_line_bytes
            self._at = at + room
            self._emit(bytes(pending) + data[at : at + room])
            pending.clear()
        else:
            pending += data[at:]
            self._at = len(data)
            return 0
        return 1

    def _emit(self, line: bytes) -> None:
        budget = self._budget
        if budget is None or budget.take():
            assert self._on_line is not None
            self._on_line(line)
        else:
            budget.drop(1)

    def _skip(self) -> None:
        """Over budget: count the lines ending in the rest of the chunk as dropped (found
        in C, never split); its unfinished last line is left, for the budget to judge when
        it ends."""
        assert self._budget is not None
        data = self._chunk
        newlines = data.count(b"\n", self._at)
        if newlines:
            self._budget.drop(newlines)
            self._at = data.rfind(b"\n") + 1

    def finish(self) -> None:
        """End of stream: hand on what is left of the chunk and a last line that had no
        newline, all at once."""
        while not self.more():
            pass
        if self._on_line is not None and self._pending:
            self._emit(bytes(self._pending))
            self._pending.clear()

    @property
    def tail(self) -> bytes:
        """The last ``tail_bytes`` bytes seen."""
        if not self._tail_bytes:
            return b""
        return bytes(self._tail[-self._tail_bytes :])
