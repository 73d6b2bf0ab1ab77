"""Writing a job's payload to its command's stdin without ever blocking the poll loop."""

from __future__ import annotations

import os
import select

# A write of at most PIPE_BUF bytes to a fresh pipe always fits (even a pipe shrunk to its
# minimum size), so small payloads skip switching the pipe to non-blocking mode.
_PIPE_BUF = select.PIPE_BUF


class PayloadWriter:
    """The write end of a command's stdin and what is left to write to it.

    ``start`` writes a small payload at once and closes stdin; a larger one is written as
    the pipe takes it: ``write`` when ``poller`` reports the pipe writable. ``fd`` is None
    once stdin is closed (all written, or the command stopped reading).
    """

    __slots__ = ("fd", "payload", "polled", "poller", "written")

    def __init__(self, fd: int, payload: bytes, poller: select.poll) -> None:
        self.fd: int | None = fd
        self.payload = memoryview(payload)
        self.poller = poller
        self.polled = False  # registered for POLLOUT (payload larger than PIPE_BUF)
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
                self.poller.register(fd, select.POLLOUT)
                self.polled = True

    def write(self) -> None:
        fd = self.fd
        assert fd is not None
        try:
            while self.written < len(self.payload):
                self.written += os.write(fd, self.payload[self.written :])
        except BlockingIOError:
            return  # pipe full: poll tells us when there is room
        except BrokenPipeError:
            pass
        self.close()

    def close(self) -> None:
        fd = self.fd
        if fd is None:
            return
        self.fd = None
        if self.polled:
            self.poller.unregister(fd)
            self.polled = False
        os.close(fd)
