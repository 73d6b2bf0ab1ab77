"""Tube names, server addresses and a put's numbers: the project's one rule for each.

The tube-name rule is beanstalkd's (``tube.c`` / ``prot.c``): 1-200 bytes of
``A-Z a-z 0-9 - + / ; . $ _ ( )``, not starting with ``-``. The supervisor's options, the
Spark tools and the bundled server all check names here, so this module imports nothing
beyond the standard library: the server can use it without pulling in a client.
"""

from __future__ import annotations

DEFAULT_PORT = 11300
DEFAULT_ADDRESS = "127.0.0.1:11300"  # private by default: the loopback interface
MAX_TUBE_NAME = 200
MAX_U32 = 2**32 - 1  # priority, delay and TTR are unsigned 32-bit fields

#: The bytes a tube name may contain (the first may not be ``-``).
TUBE_NAME_CHARS = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"
)
# No regular expression: ``re`` would be most of what this module costs the server's start.
_ALLOWED = bytes(sorted(TUBE_NAME_CHARS))


def is_tube_name(name: bytes) -> bool:
    """``name`` (as it comes off the wire) is a tube name beanstalkd accepts."""
    return (
        0 < len(name) <= MAX_TUBE_NAME
        and name[0] != 0x2D  # "-"
        and not name.translate(None, _ALLOWED)  # nothing left once the allowed bytes go
    )


def validate_tube(name: str) -> str:
    """Return ``name`` if beanstalkd accepts it as a tube name, else raise ValueError."""
    if not (name.isascii() and is_tube_name(name.encode("ascii"))):
        raise ValueError(
            f"invalid tube name {name!r}: 1-{MAX_TUBE_NAME} characters of A-Z a-z 0-9 "
            "- + / ; . $ _ ( ), not starting with '-'"
        )
    return name


def tube_bytes(name: str) -> bytes:
    """The tube name as it goes on the wire; ValueError unless the protocol accepts it."""
    return validate_tube(name).encode("ascii")


def parse_address(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` or ``[v6-host]:port`` → (host, port); ValueError when malformed.

    With ``default_port``, a bare host (``example.org``, ``[::1]``) gets that port.
    """
    text = text.strip()
    if default_port is not None and text and _bare_host(text):
        text = f"{text}:{default_port}"
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"malformed address {text!r}: expected [host]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"malformed address {text!r}: expected host:port")
        if ":" in host:
            raise ValueError(f"malformed address {text!r}: put IPv6 hosts in brackets")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"malformed address {text!r}: missing host")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"malformed address {text!r}: port must be 1-65535")
    return host, int(port_text)


def _bare_host(text: str) -> bool:
    if text.startswith("["):
        return text.rpartition("]")[2] == ""
    return text.count(":") != 1


def format_address(host: str, port: int) -> str:
    """``host:port`` as written on a command line (IPv6 hosts in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_u32(name: str, value: int) -> int:
    """``value`` if it fits the protocol's unsigned 32-bit fields, else ValueError."""
    if not 0 <= value <= MAX_U32:
        raise ValueError(f"{name} {value} is outside 0..{MAX_U32}")
    return value
