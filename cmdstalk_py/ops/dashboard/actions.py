"""``Actions``: what a dashboard token holder may do, each on a fresh connection.

Only on the supervisor's own servers and tubes: kick, delete and pause name their server
(one the supervisor serves, never an address a client makes up; it may be left out when
there is only one), since a job id means nothing without its server; a job to kick or
delete must be in one of the tubes (checked with ``stats-job`` first), a tube to pause must
be one. Drain asks the supervisor to stop
reserving and finish its running jobs, exactly as one SIGTERM does, and only once: a
second SIGTERM would kill the running commands, which a button must not do by a double
click.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence

import greenstalk

from cmdstalk_py.client.names import DEFAULT_PORT, MAX_U32, parse_address, validate_tube

TIMEOUT = 5.0


class ActionError(Exception):
    """An action refused or failed: ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Actions:
    """Kick, delete, pause on one of ``servers`` (``host:port``), for its ``tubes()``;
    drain, called once."""

    def __init__(
        self, servers: Sequence[str], tubes: Callable[[], list[str]], drain: Callable[[], None]
    ) -> None:
        if not servers:
            raise ValueError("a dashboard needs at least one server")
        self.servers = list(servers)
        self._addresses = {parse_address(s, DEFAULT_PORT): s for s in self.servers}
        self._tubes = tubes
        self._drain = drain
        self._drain_lock = threading.Lock()
        self.drained = False

    def server(self, named: str | None) -> tuple[str, int]:
        """The address of the server ``named`` (``None``: the only one), if it is ours."""
        if named is None or named == "":
            if len(self.servers) > 1:
                raise ActionError(400, "name the server: one of " + ", ".join(self.servers))
            named = self.servers[0]
        try:
            address = parse_address(named, DEFAULT_PORT)
        except ValueError as e:
            raise ActionError(400, str(e)) from None
        if address not in self._addresses:
            raise ActionError(403, f"{named} is not a server this supervisor serves")
        return address

    def _client(self, server: str | None) -> greenstalk.Client[bytes]:
        address = self.server(server)
        try:
            sock = socket.create_connection(address, timeout=TIMEOUT)
        except OSError as e:
            raise ActionError(502, f"cannot reach {self._addresses[address]}: {e}") from None
        return greenstalk.Client(sock, encoding=None)

    def _on(self, server: str | None) -> str:
        """`` on host:port`` in a message, when there are several servers to tell apart."""
        return "" if len(self.servers) == 1 else f" on {self._addresses[self.server(server)]}"

    def _own_job(self, client: greenstalk.Client[bytes], job_id: int) -> None:
        try:
            tube = client.stats_job(job_id)["tube"]
        except greenstalk.NotFoundError:
            raise ActionError(404, f"job {job_id} not found") from None
        if tube not in self._tubes():
            raise ActionError(403, f"job {job_id} is in {tube}, not a tube this supervisor runs")

    def kick(self, job_id: int, server: str | None = None) -> str:
        with self._client(server) as client:
            self._own_job(client, job_id)
            try:
                client.kick_job(job_id)
            except greenstalk.NotFoundError:
                raise ActionError(409, f"job {job_id} is neither buried nor delayed") from None
        return f"kicked job {job_id}{self._on(server)}"

    def delete(self, job_id: int, server: str | None = None) -> str:
        with self._client(server) as client:
            self._own_job(client, job_id)
            try:
                client.delete(job_id)
            except greenstalk.NotFoundError:
                raise ActionError(409, f"job {job_id} is running: it cannot be deleted") from None
        return f"deleted job {job_id}{self._on(server)}"

    def pause(self, tube: str, seconds: int, server: str | None = None) -> str:
        try:
            validate_tube(tube)
        except ValueError as e:
            raise ActionError(400, str(e)) from None
        if tube not in self._tubes():
            raise ActionError(403, f"{tube} is not a tube this supervisor runs")
        if not 0 <= seconds <= MAX_U32:
            raise ActionError(400, "seconds out of range")
        with self._client(server) as client:
            try:
                client.pause_tube(tube, seconds)
            except greenstalk.NotFoundError:
                raise ActionError(404, f"tube {tube} does not exist right now") from None
        return f"paused {tube} for {seconds}s{self._on(server)}"

    def drain(self) -> str:
        with self._drain_lock:
            if self.drained:
                return "already draining"
            self.drained = True
        self._drain()
        return "draining: no new jobs; running ones finish"
