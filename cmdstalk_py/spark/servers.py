"""Several beanstalkd servers for one Spark tool: the address list, which partition writes to
which server, and whether each server answers before any work starts.

``enqueue`` spreads its rows by partition: partition ``p`` writes to server
``p % len(servers)``, in the order given. The spread is even (partitions differ by at most
one per server) and deterministic, so a partition Spark runs again writes to the same
server as its lost attempt, and a possible duplicate stays on one server.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from cmdstalk_py.client.errors import ConnectionLost
from cmdstalk_py.client.names import DEFAULT_PORT, format_address, parse_address
from cmdstalk_py.client.pipeline import Client


class ServerUnreachable(ConnectionError):
    """Servers of the list did not accept a connection; nothing was started."""

    def __init__(self, addresses: Sequence[str], detail: str) -> None:
        super().__init__(detail)
        self.addresses = tuple(addresses)


def parse_servers(address: str | Sequence[str]) -> tuple[str, ...]:
    """``"a:1,b:2"`` or ``["a:1", "b:2"]`` → ``("a:1", "b:2")``: each ``host:port`` (a bare
    host gets port 11300), duplicates dropped, in order. ValueError when malformed or empty."""
    parts = address.split(",") if isinstance(address, str) else list(address)
    servers: list[str] = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if "," in part:
            raise ValueError(f"malformed address {part!r}: one host:port per list entry")
        server = format_address(*parse_address(part, DEFAULT_PORT))
        if server not in servers:
            servers.append(server)
    if not servers:
        raise ValueError("no beanstalkd address given")
    return tuple(servers)


def one_server(address: str | Sequence[str], command: str) -> str:
    """The one server of ``address``; ValueError when it names several (``command`` puts
    jobs back to where the user says, and spreading them is not what a requeue means)."""
    servers = parse_servers(address)
    if len(servers) > 1:
        raise ValueError(
            f"{command} takes one address, not {len(servers)} ({', '.join(servers)}): "
            "run it once per server"
        )
    return servers[0]


def server_for(servers: Sequence[str], partition: int) -> str:
    """The server partition ``partition`` writes to (round robin; -1, outside a task: the
    first)."""
    return servers[max(partition, 0) % len(servers)]


def check_servers(servers: Sequence[str], timeout: float = 5.0) -> None:
    """Connect once to each server, all at once (a list of silent hosts waits no longer
    than one); ServerUnreachable naming every one that did not answer within ``timeout``."""
    with ThreadPoolExecutor(max_workers=min(len(servers), 16) or 1) as pool:
        problems = list(pool.map(lambda address: _problem(address, timeout), servers))
    down = {address: p for address, p in zip(servers, problems, strict=True) if p}
    if down:
        raise ServerUnreachable(list(down), "; ".join(down.values()))


def _problem(address: str, timeout: float) -> str:
    """Why ``address`` does not accept a connection ('' when it does)."""
    try:
        with Client.connect(address, timeout=timeout):
            return ""
    except (ConnectionLost, OSError) as exc:
        return str(exc)
