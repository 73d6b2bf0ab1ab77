"""``Actions``: what a dashboard token holder may do, each on a fresh connection.

Only on the supervisor's own servers and tubes: kick, delete and pause name their server
(one the supervisor serves, never an address a client makes up; it may be left out when
there is only one), since a job id means nothing without its server; a job to kick or
delete must be in one of the tubes it serves on that server (checked with ``stats-job``
first), a tube to pause must be one. Drain asks the supervisor to stop reserving and finish
its running jobs, exactly as one SIGTERM does, and only once: a second SIGTERM would kill
the running commands, which a button must not do by a double click.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

import greenstalk

from cmdstalk_py.client.names import DEFAULT_PORT, MAX_U32, parse_address, validate_tube

TIMEOUT = 5.0


class Target(NamedTuple):
    """A server an action may touch: one the supervisor serves."""

    name: str  # host:port, as the supervisor names it
    address: tuple[str, int]
    several: bool  # the supervisor serves others too: messages name this one

    @property
    def on(self) -> str:
        return f" on {self.name}" if self.several else ""


class ActionError(Exception):
    """An action refused or failed: ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Actions:
    """Kick, delete, pause on one of ``servers()`` (``host:port``, asked at each action: a
    reload may change them), in the tubes the supervisor serves there (``tubes(server)``);
    drain, called once."""

    def __init__(
        self,
        servers: Callable[[], Sequence[str]],
        tubes: Callable[[str], list[str]],
        drain: Callable[[], None],
    ) -> None:
        self._servers = servers
        self._tubes = tubes
        self._drain = drain
        self._drain_lock = threading.Lock()
        self.drained = False

    def server(self, named: str | None) -> Target:
        """The server ``named`` (``None``: the only one), if it is one the supervisor
        serves, else ``ActionError`` (400 malformed or left out among several, 403 not
        ours): nothing is connected to before this check."""
        servers = list(dict.fromkeys(self._servers()))
        if not named:
            if len(servers) != 1:
                raise ActionError(400, "name the server: one of " + ", ".join(servers))
            named = servers[0]
        try:
            address = parse_address(named, DEFAULT_PORT)
        except ValueError as e:
            raise ActionError(400, str(e)) from None
        ours = {parse_address(s, DEFAULT_PORT): s for s in servers}
        if address not in ours:
            raise ActionError(403, f"{named} is not a server this supervisor serves")
        return Target(ours[address], address, len(servers) > 1)

    def _client(self, target: Target) -> greenstalk.Client[bytes]:
        try:
            sock = socket.create_connection(target.address, timeout=TIMEOUT)
        except OSError as e:
            raise ActionError(502, f"cannot reach {target.name}: {e}") from None
        return greenstalk.Client(sock, encoding=None)

    def _own_job(self, client: greenstalk.Client[bytes], target: Target, job_id: int) -> None:
        try:
            tube = client.stats_job(job_id)["tube"]
        except greenstalk.NotFoundError:
            raise ActionError(404, f"job {job_id} not found") from None
        if tube not in self._tubes(target.name):
            raise ActionError(
                403, f"job {job_id} is in {tube}, not a tube this supervisor runs{target.on}"
            )

    def kick(self, job_id: int, server: str | None = None) -> str:
        target = self.server(server)
        with self._client(target) as client:
            self._own_job(client, target, job_id)
            try:
                client.kick_job(job_id)
            except greenstalk.NotFoundError:
                raise ActionError(409, f"job {job_id} is neither buried nor delayed") from None
        return f"kicked job {job_id}{target.on}"

    def delete(self, job_id: int, server: str | None = None) -> str:
        target = self.server(server)
        with self._client(target) as client:
            self._own_job(client, target, job_id)
            try:
                client.delete(job_id)
            except greenstalk.NotFoundError:
                raise ActionError(409, f"job {job_id} is running: it cannot be deleted") from None
        return f"deleted job {job_id}{target.on}"

    def pause(self, tube: str, seconds: int, server: str | None = None) -> str:
        try:
            validate_tube(tube)
        except ValueError as e:
            raise ActionError(400, str(e)) from None
        if not 0 <= seconds <= MAX_U32:
            raise ActionError(400, "seconds out of range")
        target = self.server(server)
        if tube not in self._tubes(target.name):
            raise ActionError(403, f"{tube} is not a tube this supervisor runs{target.on}")
        with self._client(target) as client:
            try:
                client.pause_tube(tube, seconds)
            except greenstalk.NotFoundError:
                raise ActionError(404, f"tube {tube} does not exist right now") from None
        return f"paused {tube} for {seconds}s{target.on}"

    def drain(self) -> str:
        with self._drain_lock:
            if self.drained:
                return "already draining"
            self.drained = True
        self._drain()
        return "draining: no new jobs; running ones finish"
