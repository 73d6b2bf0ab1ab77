"""Bounded capture of one output stream: a tail buffer and an optional line splitter."""

from __future__ import annotations

from collections.abc import Callable


class OutputStream:
    """Keeps the last ``tail_bytes`` of a stream and hands complete lines to ``on_line``.

    Memory stays bounded whatever the command writes: the tail is trimmed as it grows and
    a line longer than ``max_line_bytes`` is emitted in pieces of that size rather than
    buffered whole. Without ``on_line`` no line splitting is done at all (the fast path).
    """

    __slots__ = ("_max_line", "_on_line", "_pending", "_tail", "_tail_bytes", "total_bytes")

    def __init__(
        self,
        tail_bytes: int,
        on_line: Callable[[bytes], None] | None = None,
        max_line_bytes: int = 65536,
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._tail_bytes = max(0, tail_bytes)
        self._tail = bytearray()
        self._on_line = on_line
        self._pending = bytearray()
        self._max_line = max_line_bytes
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
        on_line = self._on_line
        assert on_line is not None
        pending = self._pending
        start = 0
        newline = data.find(b"\n")
        while newline >= 0:
            if pending:
                pending += data[start:newline]
                self._emit_pending_pieces()
                on_line(bytes(pending))
                pending.clear()
            else:
                self._emit_long(data, start, newline)
            start = newline + 1
            newline = data.find(b"\n", start)
        if start < len(data):
            pending += data[start:]
            self._emit_pending_pieces()

    def _emit_long(self, data: bytes, start: int, end: int) -> None:
        """Emit ``data[start:end]`` as one line, or in max-size pieces if it is too long."""
        on_line = self._on_line
        assert on_line is not None
        size = self._max_line
        while end - start > size:
            on_line(data[start : start + size])
            start += size
        on_line(data[start:end])

    def _emit_pending_pieces(self) -> None:
        """Emit full pieces from an over-long pending line so the buffer stays bounded."""
        on_line = self._on_line
        assert on_line is not None
        pending = self._pending
        size = self._max_line
        while len(pending) > size:
            on_line(bytes(pending[:size]))
            del pending[:size]

    def finish(self) -> None:
        """End of stream: emit a last line that had no newline."""
        if self._on_line is not None and self._pending:
            self._on_line(bytes(self._pending))
            self._pending.clear()

    @property
    def tail(self) -> bytes:
        """The last ``tail_bytes`` bytes seen."""
        if not self._tail_bytes:
            return b""
        return bytes(self._tail[-self._tail_bytes :])
