"""How an error line or ``--check`` shows what a config file holds: a key as TOML writes
it, text with every character a terminal could act on escaped, a long quote clipped.

A pool name, a key or a command comes from the file: it may hold a dot, a line break, an
escape sequence or a bidirectional override. Shown raw, it would be ambiguous, forge a log
line or drive the operator's terminal; shown as a TOML escape (``\\u001B``), it can be
read, and pasted back into the file.
"""

from __future__ import annotations

import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def join_key(where: str, key: str) -> str:
    """``where.key``, the key bare when TOML allows, else quoted with its escapes."""
    if not _BARE_KEY.fullmatch(key):
        key = clip('"' + "".join(_TOML_ESCAPES.get(c) or _escape(c) for c in key) + '"')
    return f"{where}.{key}" if where else key


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on (controls, bidirectional
    overrides) written as a TOML escape; the rest as it is."""
    return "".join(_escape(c) for c in text)


def clip(text: str, most: int = 80) -> str:
    """An error line quotes what it names, not a megabyte of it."""
    return text if len(text) <= most else f"{text[: most - 3]}..."


def _escape(char: str) -> str:
    if char.isprintable():
        return char
    return f"\\u{ord(char):04X}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08X}"
