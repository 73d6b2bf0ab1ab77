"""What a beanstalkd server answers ``cmdstalk-ctl``, parsed strictly: pure functions.

ctl trusts no server. A reply the protocol does not allow (an unknown word, a missing or
non-numeric value, a stats reply that is not the YAML beanstalkd writes, a field ctl relies
on absent) raises ``ServerFault``, and so does an error word no command can act on
(``DRAINING``, ``OUT_OF_MEMORY``, ``INTERNAL_ERROR``…): the command stops with one
``Error:`` line and exit 3. ``NOT_FOUND`` raises ``NotFound`` and ``BURIED`` after a put
raises ``Buried``: the commands handle those. ``ERROR_REPLIES`` is the one table of words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cmdstalk_py.client.names import is_tube_name
from cmdstalk_py.ops.logsetup import escape_controls

#: Digits of the largest number a reply may carry (a u64 job id has 20).
MAX_DIGITS = 20


class ServerFault(Exception):
    """A server refused a command, broke the connection or sent a reply ctl cannot trust.

    The message is safe for a terminal: any bytes from the server in it are escaped.
    """


class NotFound(Exception):
    """``NOT_FOUND``: no such job (or not in a state that allows it), tube, or next job."""


class Buried(Exception):
    """``BURIED`` after a put: the job exists (``job_id``) but the server, out of memory,
    buried it at once."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} was buried at once: the server is out of memory")
        self.job_id = job_id


def shown(data: bytes | bytearray, limit: int = 60) -> str:
    """Bytes from a server as a terminal-safe excerpt of at most ``limit`` bytes."""
    text = escape_controls(data[:limit].decode("ascii", "backslashreplace"))
    return text + ("..." if len(data) > limit else "")


def _refusal(meaning: str) -> Callable[[bytes, list[bytes]], Exception]:
    return lambda word, values: ServerFault(f"{meaning} ({word.decode('ascii')})")


def _buried(word: bytes, values: list[bytes]) -> Exception:
    if len(values) != 1:
        return ServerFault(f"unexpected reply '{shown(b' '.join([word, *values]))}'")
    return Buried(parse_number(values[0]))


#: Every error word of the protocol → the exception it raises (given the word and values).
ERROR_REPLIES: dict[bytes, Callable[[bytes, list[bytes]], Exception]] = {
    b"NOT_FOUND": lambda word, values: NotFound(),
    b"BURIED": _buried,
    b"DRAINING": _refusal("the server is draining: it takes no new jobs"),
    b"OUT_OF_MEMORY": _refusal("the server is out of memory"),
    b"INTERNAL_ERROR": _refusal("the server reports an internal error"),
    b"JOB_TOO_BIG": _refusal("the job is larger than the server's max-job-size"),
    b"BAD_FORMAT": _refusal("the server found the command malformed"),
    b"UNKNOWN_COMMAND": _refusal("the server does not know the command"),
    b"EXPECTED_CRLF": _refusal("the server found a job body without its CRLF"),
    b"NOT_IGNORED": _refusal("the server refused to ignore the last watched tube"),
    b"DEADLINE_SOON": _refusal("a job held by this connection is about to time out"),
    b"TIMED_OUT": _refusal("the server found nothing in time"),
}


def parse_reply(line: bytes, expected: bytes, arity: int) -> list[bytes]:
    """The ``arity`` values after ``expected`` in a reply line (its CRLF removed)."""
    word, *values = line.split(b" ")
    if word == expected and len(values) == arity:
        return values
    if word != expected and word in ERROR_REPLIES:
        raise ERROR_REPLIES[word](word, values)
    raise ServerFault(f"unexpected reply '{shown(line)}' (expected {expected.decode()})")


def parse_number(value: bytes) -> int:
    """A reply's decimal field: digits only, at most ``MAX_DIGITS`` of them."""
    if not value.isdigit() or len(value) > MAX_DIGITS:
        raise ServerFault(f"not a number where the reply needs one: '{shown(value)}'")
    return int(value)


def _yaml_lines(body: bytes, what: str) -> list[str]:
    """The lines after the ``---`` head of a YAML reply (beanstalkd writes ASCII)."""
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise ServerFault(f"{what} reply holds bytes that are not ASCII") from None
    if not text.startswith("---\n"):
        raise ServerFault(f"{what} reply does not start with '---': '{shown(body)}'")
    lines = text[4:].split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line
    return lines


def parse_stats(body: bytes, what: str = "stats") -> dict[str, int | str]:
    """A stats reply's ``key: value`` lines: whole numbers as ``int``, other values as
    ``str`` without surrounding double quotes."""
    stats: dict[str, int | str] = {}
    for line in _yaml_lines(body, what):
        key, sep, value = line.partition(": ")
        if not sep or not key:
            raise ServerFault(f"{what} reply has a line that is not 'key: value': "
                              f"'{shown(line.encode())}'")  # fmt: skip
        stats[key] = _value(value)
    return stats


def _value(text: str) -> int | str:
    digits = text[1:] if text.startswith("-") else text
    if digits.isdigit() and len(digits) <= MAX_DIGITS:
        return int(text)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def parse_tube_list(body: bytes) -> list[str]:
    """A ``list-tubes`` reply: ``- name`` lines, each a valid tube name (ctl sends these
    names back in commands, so nothing else may pass)."""
    names = []
    for line in _yaml_lines(body, "list-tubes"):
        name = line[2:]
        if not line.startswith("- ") or not is_tube_name(name.encode("ascii")):
            raise ServerFault(f"list-tubes reply has a line that is not '- tube': "
                              f"'{shown(line.encode())}'")  # fmt: skip
        names.append(name)
    return names


def require_numbers(stats: dict[str, int | str], fields: Iterable[str], what: str) -> None:
    """Fault unless each of ``fields`` is in ``stats`` as a number (the commands compute
    with these fields, so a server leaving one out or garbling it is refused here)."""
    for field in fields:
        if not isinstance(stats.get(field), int):
            raise ServerFault(f"{what} reply lacks a number for {field!r}")
