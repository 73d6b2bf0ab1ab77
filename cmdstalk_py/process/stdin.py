"""Writing a job's payload to its command's stdin without ever blocking the event loop."""

from __future__ import annotations

import os
import select
from collections.abc import Callable

# A write of at most PIPE_BUF bytes to a fresh pipe always fits (even a pipe shrunk to its
# minimum size), so small payloads skip switching the pipe to non-blocking mode.
_PIPE_BUF = select.PIPE_BUF


class PayloadWriter:
    """The write end of a command's stdin and what is left to write to it.

    ``start`` writes a small payload at once and closes stdin; a larger one is written as
    the pipe takes it: the owner watches ``fd`` for writability while ``watch(True)`` is in
    force (``watch(False)`` ends it) and calls ``write`` when it is writable. ``fd`` is None
    once stdin is closed (all written, or the command stopped reading).
    """

    __slots__ = ("fd", "payload", "watch", "watched", "written")

    def __init__(self, fd: int, payload: bytes, watch: Callable[[bool], None]) -> None:
        self.fd: int | None = fd
        self.payload = memoryview(payload)
        self.watch = watch
        self.watched = False  # the owner watches fd (payload larger than PIPE_BUF)
        self.written = 0

    def start(self) -> None:
        fd = self.fd
        assert fd is not None
        size = len(self.payload)
        if size == 0:
            self.close()
        elif size <= _PIPE_BUF:
            # (Not contextlib.suppress: that is an object and two calls more, every job.)
            try:  # noqa: SIM105
                os.write(fd, self.payload)
            except BrokenPipeError:
                pass  # the command closed stdin or exited without reading: its business
            self.close()
        else:
            os.set_blocking(fd, False)
            self.write()
            if self.fd is not None:
                self.watch(True)
                self.watched = True

    def write(self) -> None:
        fd = self.fd
        assert fd is not None
        try:
            while self.written < len(self.payload):
                self.written += os.write(fd, self.payload[self.written :])
        except BlockingIOError:
            return  # pipe full: the loop tells us when there is room
        except BrokenPipeError:
            pass
        self.close()

    def close(self) -> None:
        fd = self.fd
        if fd is None:
            return
        if self.watched:
            self.watch(False)  # before the close: the loop must not watch a closed fd
            self.watched = False
        self.fd = None
        os.close(fd)
