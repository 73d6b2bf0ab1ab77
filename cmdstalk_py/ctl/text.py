"""What ``cmdstalk-ctl`` writes: safe for a terminal, at most as wide as one.

Job bodies and job output are whatever producers and commands wrote: an escape sequence in
one could retitle, recolour or rewrite an operator's terminal. Nothing from a job is
written raw: text goes through ``safe`` (controls escaped as ``\\x1b``), binary bodies are
shown in hex, and JSON is ASCII-only (every other character as ``\\uXXXX``).
"""

from __future__ import annotations

import base64
import json
import shutil
import string

import click

from cmdstalk_py.ops.logsetup import escape_controls

# Characters that reorder what follows on screen (bidi overrides): shown as escapes too.
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
_HEX_PRINTABLE = frozenset(string.ascii_letters + string.digits + string.punctuation + " ")


def width() -> int:
    """The terminal's width; 80 when stdout is not a terminal."""
    return shutil.get_terminal_size((80, 24)).columns


def safe(text: str) -> str:
    """One line of ``text`` with every control (and bidi override) escaped."""
    text = escape_controls(text)
    if any(c in _BIDI for c in text):
        text = "".join(f"\\u{ord(c):04x}" if c in _BIDI else c for c in text)
    return text


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with ``~``."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "~"


def is_text(body: bytes) -> bool:
    """Valid UTF-8 with no NUL: shown as text (its controls escaped), else as hex."""
    if b"\x00" in body:
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def preview(body: bytes, limit: int) -> list[str]:
    """The first ``limit`` bytes of ``body`` as safe lines: text lines, or a hex dump."""
    head = body[:limit]
    more = len(body) - len(head)
    if is_text(body):
        text = head.decode("utf-8", "ignore")  # a cut may split the last character
        lines = [safe(line) for line in text.split("\n")]
    else:
        lines = hexdump(head)
    if more:
        lines.append(f"... {more} more bytes")
    return lines


def hexdump(data: bytes) -> list[str]:
    """16 bytes a line: offset, hex, printable ASCII (74 columns)."""
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if chr(b) in _HEX_PRINTABLE else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  {ascii_}")
    return lines


def body_json(body: bytes) -> dict[str, object]:
    """A body for ``--json``: ``text`` when it is UTF-8 text, else ``base64``."""
    if is_text(body):
        return {"size": len(body), "text": body.decode("utf-8")}
    return {"size": len(body), "base64": base64.b64encode(body).decode("ascii")}


def echo_json(value: object) -> None:
    """``value`` as one line of ASCII-only JSON (nothing a terminal acts on)."""
    click.echo(json.dumps(value, ensure_ascii=True, sort_keys=False, default=str))


def table(headers: list[str], rows: list[list[object]], flex: int = 0) -> list[str]:
    """Rows under ``headers``, numbers right-aligned; column ``flex`` (a name) is cut so
    that the table fits the terminal."""
    cells = [[safe(str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    spare = width() - (sum(widths) + 2 * (len(widths) - 1))
    if spare < 0:
        widths[flex] = max(len(headers[flex]), widths[flex] + spare)
    numeric = [
        all(_numeric(r[i]) or r[i] == "-" for r in cells) and any(_numeric(r[i]) for r in cells)
        for i in range(len(headers))
    ]
    out = []
    for row in [headers, *cells]:
        parts = []
        for i, cell in enumerate(row):
            cell = cut(cell, widths[i])
            parts.append(cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i]))
        out.append("  ".join(parts).rstrip())
    return out


def _numeric(cell: str) -> bool:
    return cell.replace(".", "", 1).isdigit()


def echo_lines(lines: list[str]) -> None:
    for line in lines:
        click.echo(line)
