"""systemd's notify protocol (``Type=notify``): READY=1, STOPPING=1, WATCHDOG=1 and STATUS=.

The protocol is one datagram of ``KEY=VALUE`` lines to the AF_UNIX socket named by
``$NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace). Without that variable
every method is a no-op, so the same binary runs under supervisord or a terminal unchanged.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.results import JobResult

log = logging.getLogger("cmdstalk.notify")

# Variables systemd sets for us alone: job commands must not inherit them, or a worker that
# speaks the protocol itself would talk to systemd on our behalf.
NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
STATUS_INTERVAL = 5.0  # seconds between STATUS= updates sent from heartbeat()


def socket_address(value: str) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` as a bindable address: a path, or ``\\0name`` for ``@name``."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # systemd also allows vsock: addresses; we do not speak those


def watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of ``WATCHDOG_USEC``), or None if not asked for."""
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    wpid = env.get("WATCHDOG_PID", "")
    if wpid and wpid != str(pid):
        return None  # the watchdog belongs to another process (e.g. our parent)
    return int(usec) / 1e6 / 2


class SystemdNotifier(Observer):
    """Tells systemd about readiness, shutdown and liveness; does nothing outside systemd.

    ``environ`` defaults to ``os.environ``; then the notify variables are removed from it
    (``unset_environment``) so job commands started later do not inherit them.
    Never raises: a failed send is logged at debug level and forgotten.
    """

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        unset_environment: bool = True,
    ) -> None:
        env = os.environ if environ is None else environ
        self._clock = clock
        self._address = socket_address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_interval = watchdog_interval(env, os.getpid()) if self._address else None
        self._last_ping: float | None = None
        self._last_status_at: float | None = None
        self._last_status = ""
        self._finished = 0
        self._stopping = False
        self._busy: dict[tuple[str, int], bool] = {}
        if environ is None and unset_environment:
            for name in NOTIFY_VARS:
                os.environ.pop(name, None)

    @property
    def enabled(self) -> bool:
        """Whether ``$NOTIFY_SOCKET`` named a socket we can send to."""
        return self._address is not None

    def notify(self, *lines: str) -> bool:
        """Send ``lines`` as one datagram; True if it was sent."""
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self._address)
                sock.sendall("\n".join(lines).encode() + b"\n")
            return True
        except OSError as exc:
            log.debug("sd_notify %s failed: %s", lines, exc)
            return False

    def status(self, text: str) -> bool:
        """Set the one-line status ``systemctl status`` shows."""
        self._last_status = text
        self._last_status_at = self._clock()
        return self.notify(f"STATUS={text}")

    def _send_with_status(self, line: str, text: str) -> None:
        self._last_status, self._last_status_at = text, self._clock()
        self.notify(line, f"STATUS={text}")

    def ready(self) -> None:
        self._send_with_status("READY=1", "brokers connected, processing jobs")

    def stopping(self) -> None:
        self._stopping = True
        self._send_with_status("STOPPING=1", "stopping: letting running jobs finish")

    def job_finished(self, result: JobResult) -> None:
        self._finished += 1  # a racy += may miss a count; it is only a status line

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        self._busy[(tube, slot)] = busy

    def _status_text(self) -> str:
        busy = sum(self._busy.copy().values())
        text = f"{self._finished} jobs finished, {busy}/{len(self._busy)} brokers busy"
        return f"stopping: {text}" if self._stopping else text

    def heartbeat(self) -> None:
        """WATCHDOG=1 when half the watchdog period has passed; a fresh STATUS= now and then."""
        if self._address is None:
            return
        now = self._clock()
        lines = []
        if self.watchdog_interval is not None and (
            self._last_ping is None or now - self._last_ping >= self.watchdog_interval
        ):
            lines.append("WATCHDOG=1")
            self._last_ping = now
        text = self._status_text()
        if text != self._last_status and (
            self._last_status_at is None or now - self._last_status_at >= STATUS_INTERVAL
        ):
            lines.append(f"STATUS={text}")
            self._last_status, self._last_status_at = text, now
        if lines:
            self.notify(*lines)
