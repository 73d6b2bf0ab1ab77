"""Connections to the servers named by ``--address``, and the errors that end a command.

Every command talks to beanstalkd through ``beanstalk.Beanstalk`` on a socket connected
here: connecting, and each command with its whole reply, obey ``--timeout``, and replies
are bounded in bytes (``wire``). A silent, slow, refusing or garbling server makes the
command fail with one ``Error:`` line and exit 3, never hang, grow or print a traceback.
Exit codes are the contract with scripts: 0 done, 1 not found (a job, a tube, an event
record; nothing to peek), 2 usage (click), 3 a server (or supervisor) could not be
reached, broke the connection, refused the command or sent a reply ctl cannot trust.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from cmdstalk_py.client.names import DEFAULT_PORT, format_address, parse_address
from cmdstalk_py.ctl.beanstalk import Beanstalk
from cmdstalk_py.ctl.replies import NotFound, ServerFault
from cmdstalk_py.ctl.text import safe
from cmdstalk_py.ctl.wire import Wire

T = TypeVar("T")

EXIT_NOT_FOUND = 1
EXIT_UNREACHABLE = 3

#: stats-tube field → column heading of ``tubes`` and ``top``.
TUBE_COLUMNS = {
    "current-jobs-ready": "READY",
    "current-jobs-reserved": "RESERVED",
    "current-jobs-delayed": "DELAYED",
    "current-jobs-buried": "BURIED",
    "current-jobs-urgent": "URGENT",
    "current-waiting": "WAITING",
    "pause-time-left": "PAUSED",
}


class NotFoundExit(click.ClickException):
    """What was asked for does not exist (exit 1)."""

    exit_code = EXIT_NOT_FOUND


class Unreachable(click.ClickException):
    """A server could not be reached, broke the connection, refused the command or sent
    a reply ctl cannot trust (exit 3)."""

    exit_code = EXIT_UNREACHABLE


def parse_addresses(text: str) -> list[str]:
    """``a,b:11301,[::1]`` → normalised ``host:port`` strings; ValueError when malformed."""
    addresses = []
    for part in text.split(","):
        if part.strip():
            host, port = parse_address(part, DEFAULT_PORT)
            addresses.append(format_address(host, port))
    if not addresses:
        raise ValueError("no address given")
    return addresses


@dataclass(frozen=True)
class Target:
    """The servers a command acts on and how long it waits for each."""

    addresses: tuple[str, ...]
    timeout: float

    def single(self) -> str:
        """The one address of a command that names jobs by id (ids are per server)."""
        if len(self.addresses) != 1:
            raise click.UsageError("job ids are per server: give a single --address")
        return self.addresses[0]

    @contextlib.contextmanager
    def connect(self, address: str, use: str | None = None) -> Iterator[Beanstalk]:
        """A client on ``address`` (using tube ``use``); connection failures → exit 3."""
        host, port = parse_address(address, DEFAULT_PORT)
        try:
            sock = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as e:
            raise Unreachable(f"cannot reach {address}: {e}") from None
        try:
            client = Beanstalk(Wire(sock, self.timeout))
            if use is not None:
                client.use(use)
            yield client
        except ServerFault as e:
            raise Unreachable(safe(f"{address}: {e}")) from None
        finally:
            sock.close()


def read_each(
    target: Target, read: Callable[[Beanstalk], T | None]
) -> tuple[dict[str, T], list[str]]:
    """``read`` on every server: its results by address (None ones left out), and the
    failures, so that read commands show what they can and exit 3 at the end."""
    found: dict[str, T] = {}
    errors = []
    for address in target.addresses:
        try:
            with target.connect(address) as client:
                value = read(client)
        except Unreachable as e:
            errors.append(e.message)
            continue
        if value is not None:
            found[address] = value
    return found, errors


def report_unreachable(errors: list[str]) -> None:
    """After a read command printed what it could: each failure on stderr, then exit 3."""
    if errors:
        for error in errors:
            click.echo(f"Error: {error}", err=True)
        raise SystemExit(EXIT_UNREACHABLE)


def tube_stats(client: Beanstalk) -> dict[str, dict[str, Any]]:
    """stats-tube of every tube on the server (one that vanished meanwhile is left out)."""
    found = {}
    for name in sorted(client.tubes()):
        try:
            found[name] = dict(client.stats_tube(name))
        except NotFound:
            continue
    return found
