"""Logging setup: readable text (Go cmdstalk's ``[tube:slot]`` prefix) or one JSON object a line.

Brokers log through the standard library with structured extras::

    log.info("exit 0, deleted", extra={"tube": "mail", "slot": 2, "job_id": 17, "event": "deleted"})

The text format renders that as ``2026-11-21T12:00:00.123Z INFO [mail:2] job 17 exit 0, deleted``;
the JSON format as ``{"ts": ..., "level": "INFO", "logger": ..., "msg": ..., "tube": "mail",
"slot": 2, "job_id": 17, "event": "deleted"}``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import sys
from typing import TextIO

from cmdstalk_py.ops.logsink import SinkHandler

# Structured extras a record may carry, in the order the JSON format writes them.
EXTRA_KEYS = ("tube", "slot", "job_id", "event")

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")


# What a job's output must not bring into a text log: C0 controls but tab (CR rewrites the
# line on a terminal, LF starts a forged one, ESC starts terminal commands, NUL truncates
# in some readers), DEL, and the C1 controls (U+009B is a one-character CSI).
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r"}
# What json.dumps(ensure_ascii=False) leaves raw although a terminal or a line-oriented
# reader acts on it: DEL, C1 controls, and the Unicode line and paragraph separators.
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or f"\\x{ord(char):02x}"


def escape_controls(text: str) -> str:
    """``text`` with control characters written as escapes (``\\r``, ``\\x1b``, ``\\x00``)."""
    return _CONTROLS.sub(_escape, text)


def json_safe(text: str) -> str:
    """A ``json.dumps`` text with the characters it leaves raw escaped as ``\\uXXXX``
    (still valid JSON, decoding to the same value)."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# The last second formatted, shared by every thread (a tuple: replaced whole, atomically):
# brokers log several lines per job, mostly within the same second.
_last_second: tuple[int, str] = (-(2**62), "")


def iso_utc(epoch: float) -> str:
    """``epoch`` as UTC ISO 8601 with milliseconds and ``Z``: ``2026-11-21T12:00:00.123Z``."""
    global _last_second
    second = math.floor(epoch)
    # Rounded to microseconds first, as datetime does, then truncated to milliseconds.
    micros = round((epoch - second) * 1e6)
    if micros >= 1_000_000:
        second += 1
        micros -= 1_000_000
    cached = _last_second
    if cached[0] != second:
        stamp = dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        cached = _last_second = (second, stamp)
    return f"{cached[1]}.{micros // 1000:03d}Z"


def _prefix(record: logging.LogRecord) -> str:
    """``[tube:slot] job N `` for broker lines, as much of it as the record carries."""
    tube = getattr(record, "tube", None)
    slot = getattr(record, "slot", None)
    job_id = getattr(record, "job_id", None)
    parts = []
    if tube is not None:
        parts.append(f"[{tube}:{slot}]" if slot is not None else f"[{tube}]")
    if job_id is not None:
        parts.append(f"job {job_id}")
    return " ".join(parts) + " " if parts else ""


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> [tube:slot] job N <message>``, tracebacks on following lines.

    Control characters in the message (a job's output) are escaped: one record, one line,
    and nothing a terminal acts on.
    """

    def format(self, record: logging.LogRecord) -> str:
        line = f"{iso_utc(record.created)} {record.levelname} {_prefix(record)}"
        line += escape_controls(record.getMessage())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, then the structured extras present.

    Tracebacks go into an ``exc`` string so a record always stays on one line.
    """

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, object] = {
            "ts": iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in EXTRA_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                obj[key] = value
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            obj["stack"] = self.formatStack(record.stack_info)
        # default=str: an odd extra (a Path, an enum) must not turn a log call into a crash.
        return json_safe(json.dumps(obj, ensure_ascii=False, default=str))


class _OurHandler(logging.StreamHandler[TextIO]):
    """The handler ``configure_logging`` installs on an in-memory stream (which cannot
    stall), told apart so a second call replaces it."""


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def make_handler(stream: TextIO) -> logging.Handler:
    """A ``SinkHandler`` on ``stream``'s descriptor (stderr, a file, a pipe: anything that
    can block), a plain stream handler for a stream without one (a test's StringIO)."""
    fd = _fileno(stream)
    if fd is None:
        return _OurHandler(stream)
    stream.flush()  # what was written through the stream goes first
    return SinkHandler(fd)


def make_formatter(fmt: str) -> logging.Formatter:
    """The formatter for ``--log-format`` ``text`` or ``json``."""
    if fmt == "text":
        return TextFormatter()
    if fmt == "json":
        return JsonFormatter()
    raise ValueError(f"unknown log format {fmt!r} (expected one of {', '.join(FORMATS)})")


def parse_level(level: str) -> int:
    """A level name (any case) as its number; ValueError for anything else."""
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (expected one of {', '.join(LEVELS)})")
    return int(getattr(logging, name))


def configure_logging(fmt: str = "text", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (default stderr) in ``fmt`` at ``level``.

    Writing never blocks a logging thread (see ``logsink``): a stalled stderr costs log
    lines, counted and reported, never a job. Replaces a handler installed by an earlier
    call; leaves other handlers (pytest's capture, an embedding application's) alone.
    Raises ValueError for an unknown format or level.
    """
    formatter = make_formatter(fmt)
    numeric = parse_level(level)
    handler = make_handler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, (_OurHandler, SinkHandler)):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(numeric)


def lean_records() -> None:
    """Skip what log records compute but our formatters never show: the caller's file and
    line, thread and process names (the logging HOWTO's "Optimization" switches).

    Process-wide: for a process whose logging we own, i.e. the ``cmdstalk`` CLI, which
    logs lines for every job.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
