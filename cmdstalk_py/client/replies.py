"""Pure parsers for what a beanstalkd server sends back: reply lines, stats YAML, lists.

No sockets here: each takes bytes and returns values or raises. A reply that is not what
the protocol allows raises ``UnexpectedReply`` (a connection-level failure); an error word
raises its exception from ``errors.ERROR_REPLIES``.
"""

from __future__ import annotations

from cmdstalk_py.client.errors import UnexpectedReply, error_for


def parse_reply(line: bytes, expected: bytes, arity: int) -> list[bytes]:
    """The ``arity`` values after ``expected`` in a reply line (CRLF already stripped)."""
    words = line.split(b" ")
    if words[0] != expected:
        raise error_for(line)
    if len(words) != arity + 1:
        raise UnexpectedReply(f"unexpected reply {line[:80]!r} ({arity} values expected)")
    return words[1:]


def parse_int(value: bytes) -> int:
    """A decimal number field of a reply."""
    if not value.isdigit():
        raise UnexpectedReply(f"not a number in a reply: {value[:40]!r}")
    return int(value)


def parse_stats(body: bytes) -> dict[str, int | str]:
    """A stats reply's YAML (``---`` then ``key: value`` lines): integers as ``int``,
    other values as ``str`` without surrounding double quotes (greenstalk's result)."""
    stats: dict[str, int | str] = {}
    for line in _yaml_lines(body):
        key, sep, value = line.partition(": ")
        if not sep:
            raise UnexpectedReply(f"bad stats line: {line[:80]!r}")
        if value.isdigit() or (value[:1] == "-" and value[1:].isdigit()):
            stats[key] = int(value)
        elif len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            stats[key] = value[1:-1]
        else:
            stats[key] = value
    return stats


def parse_list(body: bytes) -> list[str]:
    """A list reply's YAML (``---`` then ``- item`` lines), e.g. ``list-tubes``."""
    items: list[str] = []
    for line in _yaml_lines(body):
        if not line.startswith("- "):
            raise UnexpectedReply(f"bad list line: {line[:80]!r}")
        items.append(line[2:])
    return items


def _yaml_lines(body: bytes) -> list[str]:
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise UnexpectedReply(f"not ASCII: {body[:40]!r}") from None
    if not text.startswith("---\n"):
        raise UnexpectedReply(f"not a YAML reply: {text[:40]!r}")
    return text[4:].splitlines()
