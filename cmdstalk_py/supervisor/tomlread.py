"""The config file's bytes → its TOML tables, in bounded time, or one line saying why not.

``tomllib`` raises ``UnicodeDecodeError`` on bytes that are not UTF-8 and ``RecursionError``
on arrays nested a few hundred deep, and it takes time quadratic in a key's dotted parts
(``a.a.a… = 1``: 80 KB of them take 25 s). The file is read from the loop that acts on
SIGTERM, so a key with more parts than any pool file needs is refused before ``tomllib``
sees it: a linear scan that skips strings and comments counts the dots of each key.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

#: The most dotted parts a key or table header may have: a pool file's deepest has five
#: (``pools.NAME.rates.TUBE.burst``), and a deeper one could only be an unknown key.
MAX_KEY_PARTS = 8

_BARE_RUN = re.compile(r"""[^"'#]*""")  # up to the next string or comment
_BASIC_REST = re.compile(r'(?:[^"\\\n]|\\.)*"?')  # a one-line "…" after its quote
_KEY_END = re.compile(r"[=\[\]{},\n]")  # what ends a key (or a value's dotted number)


def parse(raw: bytes) -> dict[str, Any]:
    """The TOML tables of ``raw``; ValueError with one line when it is not usable TOML."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - raw.rfind(b"\n", 0, e.start)
        where = f"line {line}, column {column} (byte {e.start + 1})"
        raise ValueError(f"not UTF-8 at {where}") from None
    _check_key_parts(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not valid TOML: {e}") from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table.
        raise ValueError("not valid TOML: arrays or inline tables nested too deeply") from None


def _check_key_parts(text: str) -> None:
    # A key is on one line: a file without a line of that many dots needs no scan.
    if max(line.count(".") for line in text.split("\n")) < MAX_KEY_PARTS:
        return
    dots = 0  # in the key being read: a quoted part between two dots does not end it
    for start, run in _bare_runs(text):
        pieces = _KEY_END.split(run)
        counts = [dots + pieces[0].count(".")] + [piece.count(".") for piece in pieces[1:]]
        most = max(counts)
        if most >= MAX_KEY_PARTS:  # parts are dots + 1
            at = start + sum(len(piece) + 1 for piece in pieces[: counts.index(most)])
            line = text.count("\n", 0, at) + 1
            raise ValueError(f"a key at line {line} has more than {MAX_KEY_PARTS} dotted parts")
        dots = counts[-1]


def _bare_runs(text: str) -> list[tuple[int, str]]:
    """The text outside strings and comments, as (offset, run). Each character is looked
    at once, however the quotes are placed: no pattern rescans a line from every quote."""
    runs: list[tuple[int, str]] = []
    pos, end = 0, len(text)
    while pos < end:
        bare = _BARE_RUN.match(text, pos)
        assert bare is not None  # the pattern matches the empty string
        if bare.end() > pos:
            runs.append((pos, bare.group()))
        pos = bare.end()
        if pos < end:
            pos = _skip(text, pos)
    return runs


def _skip(text: str, pos: int) -> int:
    """The offset after the string or comment starting at ``pos``."""
    char = text[pos]
    if char == "#":  # its line's newline stays: it ends a key
        return _line_end(text, pos)
    if text.startswith(char * 3, pos):
        return _multiline_end(text, pos + 3, char)
    if char == "'":
        close = text.find("'", pos + 1, _line_end(text, pos))
        return close + 1 if close >= 0 else _line_end(text, pos)
    rest = _BASIC_REST.match(text, pos + 1)
    assert rest is not None  # the pattern matches the empty string
    return rest.end()


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _multiline_end(text: str, pos: int, quote: str) -> int:
    """After the closing quotes of a multi-line string whose text starts at ``pos``."""
    while True:
        found = text.find(quote * 3, pos)
        if found < 0:
            return len(text)
        escapes = 0  # in a basic string, \""" is an escaped quote, then two more
        while quote == '"' and text[found - 1 - escapes] == "\\":
            escapes += 1
        if escapes % 2 == 0:
            return found + 3
        pos = found + 1
