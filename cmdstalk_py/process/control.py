"""The control channel: one-line requests a command writes to its supervisor.

The command finds the write end of a pipe on the descriptor named in
``CMDSTALK_CONTROL_FD`` (3) and may write lines such as ``touch``, ``retry-after 30``,
``bury`` or ``progress 40% done`` to it, from any language (``echo touch >&3``).
``ControlReader`` reads the read end on ``run_command``'s event loop with bounded work: one
read per wakeup, a bounded line buffer (a longer line is cut and then skipped to its end),
and at most ``budget`` bytes a second (past that the pipe is not watched until the next
second, so a flood fills the pipe and blocks its writer, never the supervisor).
``parse_request`` turns a line into ``(verb, argument)`` or raises ``ControlError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: The descriptor the command finds the channel on, and the variable that names it.
CONTROL_FD = 3
CONTROL_ENV = "CMDSTALK_CONTROL_FD"
#: The longest request, bytes without its newline; a longer one is refused whole.
MAX_REQUEST = 1024
#: Bytes of requests read per second at most; the rest waits in the pipe.
BUDGET = 65536
_READ_SIZE = 4096
# beanstalkd stores delays as 32-bit seconds.
_MAX_DELAY = 2**32 - 1


class ControlError(ValueError):
    """A request that is malformed, unknown or too long."""


def parse_request(line: bytes) -> tuple[str, int | str | None]:
    """``b"retry-after 7"`` → ``("retry-after", 7)``; ``b"progress 3/9"`` → ``("progress",
    "3/9")``; ``touch`` and ``bury`` take no argument. Raises ``ControlError``."""
    if len(line) > MAX_REQUEST:
        raise ControlError(f"request over {MAX_REQUEST} bytes")
    text = line.decode("utf-8", "replace").strip()
    verb, _, arg = text.partition(" ")
    verb = verb.lower()
    arg = arg.strip()
    if verb in ("touch", "bury"):
        if arg:
            raise ControlError(f"{verb} takes no argument: {_shown(text)}")
        return verb, None
    if verb == "retry-after":
        if not arg.isascii() or not arg.isdigit() or int(arg) > _MAX_DELAY:
            raise ControlError(f"retry-after needs whole seconds (0-{_MAX_DELAY}): {_shown(text)}")
        return verb, int(arg)
    if verb == "progress":
        if not arg:
            raise ControlError("progress needs a text")
        return verb, arg
    raise ControlError(f"unknown request: {_shown(text)}")


def _shown(text: str) -> str:
    """A request as quoted in a log line: short, printable."""
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


class ControlReader:
    """Splits what a command writes on its channel into lines for ``on_line``.

    Blank lines are skipped. The owner watches the pipe (``fd``) for reading while
    ``watch(True)`` is in force (``watch(False)`` ends it; ``start`` gives the first),
    calls ``on_readable`` when it is readable and ``resume`` at ``paused_until`` (a
    ``time.monotonic()`` value) after the budget stopped the watching.
    """

    __slots__ = (
        "_budget",
        "_on_line",
        "_pending",
        "_skipping",
        "_watch",
        "_watched",
        "_window",
        "_window_bytes",
        "fd",
        "paused_until",
    )

    def __init__(
        self,
        fd: int,
        on_line: Callable[[bytes], None],
        watch: Callable[[bool], None],
        budget: int = BUDGET,
    ) -> None:
        self.fd = fd  # -1 once closed
        self._on_line = on_line
        self._watch = watch
        self._watched = False
        self._budget = budget
        self._pending = bytearray()
        self._skipping = False  # inside a line already refused as too long
        self._window = 0.0
        self._window_bytes = 0
        self.paused_until: float | None = None

    def start(self) -> None:
        os.set_blocking(self.fd, False)
        self._set_watched(True)

    def on_readable(self, now: float) -> None:
        """The pipe is readable (or closed by every writer)."""
        if not self.read(now):
            self.close()  # nothing more can come
        elif self.paused_until is not None:
            self._set_watched(False)  # over budget: rest until paused_until

    def resume(self, now: float) -> None:
        if self.paused_until is not None and now >= self.paused_until and self.fd >= 0:
            self.paused_until = None
            self._set_watched(True)

    def close(self) -> None:
        if self.fd >= 0:
            self._set_watched(False)
            os.close(self.fd)
            self.fd = -1

    def _set_watched(self, on: bool) -> None:
        if on != self._watched:
            self._watch(on)
        self._watched = on

    def read(self, now: float) -> bool:
        """Read once; False at end of file (every writer closed its end)."""
        data = self._chunk()
        if data is None:
            return True
        if not data:
            return False
        if now - self._window >= 1.0:
            self._window, self._window_bytes = now, 0
        self._window_bytes += len(data)
        if self._window_bytes >= self._budget:
            self.paused_until = self._window + 1.0
        self._split(data)
        return True

    def drain(self) -> None:
        """After the command exited: read what it left in the pipe (at most one budget).

        A last request without its newline counts once the pipe is empty; a flood still
        going (a descendant writing on) is cut off.
        """
        for _ in range(self._budget // _READ_SIZE + 1):
            data = self._chunk()
            if not data:  # empty (None) or closed (b""): nothing more to wait for
                if self._pending and not self._skipping:
                    self._on_line(bytes(self._pending))
                break
            self._split(data)
        self._pending.clear()

    def _chunk(self) -> bytes | None:
        """One read; None when the pipe is empty now, b"" at end of file."""
        if self.fd < 0:
            return b""
        try:
            return os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return None

    def _split(self, data: bytes) -> None:
        start = 0
        newline = data.find(b"\n")
        while newline >= 0:
            self._take(data[start:newline], end=True)
            start = newline + 1
            newline = data.find(b"\n", start)
        if start < len(data):
            self._take(data[start:], end=False)

    def _take(self, piece: bytes, end: bool) -> None:
        if self._skipping:
            self._skipping = not end
            return
        pending = self._pending
        pending += piece
        if len(pending) > MAX_REQUEST:
            # Hand over just enough to be refused as too long; skip the rest of the line.
            self._on_line(bytes(pending[: MAX_REQUEST + 1]))
            pending.clear()
            self._skipping = not end
        elif end:
            line = bytes(pending).strip()
            pending.clear()
            if line:
                self._on_line(line)
