"""``HostCheck``: which ``Host`` headers the dashboard answers (DNS rebinding).

A rebinding page is served from a name its author controls, then that name is made to
resolve to the dashboard's address: the browser then sends that name in ``Host``. So a
request is answered only when its ``Host`` names, exactly, an address the dashboard listens
on, ``localhost`` when it listens on a loopback address, the name given to ``--http``, or a
name the operator allowed (``--http-allow-host``). An address literal cannot be rebound,
so with a wildcard address (``0.0.0.0``, ``::``: every address of the host, forwarded
ones included) any well-formed address literal is answered. The port is not compared:
an SSH tunnel or a port forward changes it and proves nothing either way.

Parsing is strict: ``127.1``, ``127.0.0.1.evil.example``, ``[::1].x``, ``localhost.``
are names (or nothing), never the address they resemble.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_host(header: str) -> Address | str | None:
    """The host a ``Host`` header names: an address, a lowercased name, or None when it
    is malformed (an empty name, a bad port, an unbracketed IPv6 address, a zone id)."""
    if header.startswith("["):
        inside, bracket, rest = header[1:].partition("]")
        if not bracket or (rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        try:
            return ipaddress.IPv6Address(inside) if "%" not in inside else None
        except ValueError:
            return None
    host, colon, port = header.partition(":")
    if colon and not _PORT.fullmatch(port):
        return None
    return _address_or_name(host)


def _address_or_name(text: str) -> Address | str | None:
    try:
        return ipaddress.IPv4Address(text)  # strict: dotted quad only, never "127.1"
    except ValueError:
        pass
    name = text.lower()
    return name if _NAME.fullmatch(name) else None


def allowed_names(values: Iterable[str]) -> set[Address | str]:
    """The operator's ``--http-allow-host`` values (each may list several, split by commas
    or spaces) as ``HostCheck`` compares them; ValueError for one no ``Host`` could match."""
    found: set[Address | str] = set()
    for text in (name for value in values for name in value.replace(",", " ").split()):
        host = parse_host(text)
        if host is None:
            raise ValueError(f"--http-allow-host: {text!r} is not a host name or address")
        found.add(host)
    return found


class HostCheck:
    """Whether a ``Host`` header names the dashboard (see the module's docstring).

    ``listen``: the host given to ``--http``; ``bound``: the address it was bound to;
    ``allowed``: the operator's extra names or addresses.
    """

    def __init__(self, listen: str, bound: str, allowed: Iterable[str] = ()) -> None:
        self.bound = ipaddress.ip_address(bound.split("%", 1)[0])
        self.wildcard = self.bound.is_unspecified
        self.names = allowed_names(allowed)
        self.names.add(self.bound)
        given = _address_or_name(listen.strip("[]").lower())
        if given is not None:
            self.names.add(given)
        if self.bound.is_loopback or self.wildcard:
            self.names.add("localhost")

    def allows(self, header: str | None) -> bool:
        host = parse_host(header) if header else None
        if host is None:
            return False
        if self.wildcard and not isinstance(host, str):
            return True
        return host in self.names
