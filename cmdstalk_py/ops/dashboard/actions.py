"""``Actions``: what a dashboard token holder may do, each on a fresh connection.

Only on the supervisor's own tubes: a job to kick or delete must be in one of them (checked
with ``stats-job`` first), a tube to pause must be one. Drain asks the supervisor to stop
reserving and finish its running jobs, exactly as one SIGTERM does, and only once: a
second SIGTERM would kill the running commands, which a button must not do by a double
click.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import greenstalk

from cmdstalk_py.client.names import DEFAULT_PORT, MAX_U32, parse_address, validate_tube

TIMEOUT = 5.0


class ActionError(Exception):
    """An action refused or failed: ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Actions:
    """Kick, delete, pause, drain: for ``address``'s ``tubes()``; ``drain`` is called once."""

    def __init__(
        self, address: str, tubes: Callable[[], list[str]], drain: Callable[[], None]
    ) -> None:
        self._address = parse_address(address, DEFAULT_PORT)
        self._tubes = tubes
        self._drain = drain
        self._drain_lock = threading.Lock()
        self.drained = False

    def _client(self) -> greenstalk.Client[bytes]:
        try:
            sock = socket.create_connection(self._address, timeout=TIMEOUT)
        except OSError as e:
            raise ActionError(502, f"cannot reach the server: {e}") from None
        return greenstalk.Client(sock, encoding=None)

    def _own_job(self, client: greenstalk.Client[bytes], job_id: int) -> None:
        try:
            tube = client.stats_job(job_id)["tube"]
        except greenstalk.NotFoundError:
            raise ActionError(404, f"job {job_id} not found") from None
        if tube not in self._tubes():
            raise ActionError(403, f"job {job_id} is in {tube}, not a tube this supervisor runs")

    def kick(self, job_id: int) -> str:
        with self._client() as client:
            self._own_job(client, job_id)
            try:
                client.kick_job(job_id)
            except greenstalk.NotFoundError:
                raise ActionError(409, f"job {job_id} is neither buried nor delayed") from None
        return f"kicked job {job_id}"

    def delete(self, job_id: int) -> str:
        with self._client() as client:
            self._own_job(client, job_id)
            try:
                client.delete(job_id)
            except greenstalk.NotFoundError:
                raise ActionError(409, f"job {job_id} is running: it cannot be deleted") from None
        return f"deleted job {job_id}"

    def pause(self, tube: str, seconds: int) -> str:
        try:
            validate_tube(tube)
        except ValueError as e:
            raise ActionError(400, str(e)) from None
        if tube not in self._tubes():
            raise ActionError(403, f"{tube} is not a tube this supervisor runs")
        if not 0 <= seconds <= MAX_U32:
            raise ActionError(400, "seconds out of range")
        with self._client() as client:
            try:
                client.pause_tube(tube, seconds)
            except greenstalk.NotFoundError:
                raise ActionError(404, f"tube {tube} does not exist right now") from None
        return f"paused {tube} for {seconds}s"

    def drain(self) -> str:
        with self._drain_lock:
            if self.drained:
                return "already draining"
            self.drained = True
        self._drain()
        return "draining: no new jobs; running ones finish"
