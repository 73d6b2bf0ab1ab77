"""Logging setup: readable text (Go cmdstalk's ``[tube:slot]`` prefix) or one JSON object a line.

Brokers log through the standard library with structured extras::

    log.info("exit 0, deleted", extra={"tube": "mail", "slot": 2, "job_id": 17, "event": "deleted"})

The text format renders that as ``2026-11-21T12:00:00.123Z INFO [mail:2] job 17 exit 0, deleted``;
the JSON format as ``{"ts": ..., "level": "INFO", "logger": ..., "msg": ..., "tube": "mail",
"slot": 2, "job_id": 17, "event": "deleted"}``.

Per-job lines (``joblog``) may skip the logging machinery: when the handler installed here
is the only one that would see them, they are rendered and written by it directly
(``LineHandler.write_line``), the same bytes at about half the cost.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import TextIO

# Structured extras a record may carry, in the order the JSON format writes them.
EXTRA_KEYS = ("tube", "slot", "job_id", "event")

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")


# The last second formatted, shared by every thread (a tuple: replaced whole, atomically).
# Brokers log a line per job, often many in one second; datetime per line was a quarter
# of what a log line cost.
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


def _prefix(extras: Mapping[str, object]) -> str:
    """``[tube:slot] job N `` for broker lines, as much of it as ``extras`` carries."""
    tube = extras.get("tube")
    slot = extras.get("slot")
    job_id = extras.get("job_id")
    if job_id is not None and slot is not None and tube is not None:
        return f"[{tube}:{slot}] job {job_id} "  # a line about a job: the common case
    parts = []
    if tube is not None:
        parts.append(f"[{tube}:{slot}]" if slot is not None else f"[{tube}]")
    if job_id is not None:
        parts.append(f"job {job_id}")
    return " ".join(parts) + " " if parts else ""


def _record_extras(record: logging.LogRecord) -> dict[str, object]:
    return {key: getattr(record, key, None) for key in EXTRA_KEYS}


class LineFormatter(logging.Formatter):
    """A formatter that also renders a line from its fields, with no ``LogRecord``.

    ``format(record)`` is ``render`` of the record's fields, so a line written through
    ``LineHandler.write_line`` is exactly the line the same call through logging gives.
    """

    def render(
        self,
        created: float,
        levelname: str,
        name: str,
        msg: str,
        extras: Mapping[str, object],
        exc: str | None = None,
        stack: str | None = None,
    ) -> str:
        raise NotImplementedError

    def format(self, record: logging.LogRecord) -> str:
        return self.render(
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            _record_extras(record),
            self.formatException(record.exc_info) if record.exc_info else None,
            self.formatStack(record.stack_info) if record.stack_info else None,
        )


class TextFormatter(LineFormatter):
    """``<UTC time> <LEVEL> [tube:slot] job N <message>``, tracebacks on following lines."""

    def render(
        self,
        created: float,
        levelname: str,
        name: str,
        msg: str,
        extras: Mapping[str, object],
        exc: str | None = None,
        stack: str | None = None,
    ) -> str:
        line = f"{iso_utc(created)} {levelname} {_prefix(extras)}{msg}"
        if exc:
            line += "\n" + exc
        if stack:
            line += "\n" + stack
        return line


class JsonFormatter(LineFormatter):
    """One JSON object per record: ts, level, logger, msg, then the structured extras present.

    Tracebacks go into an ``exc`` string so a record always stays on one line.
    """

    def render(
        self,
        created: float,
        levelname: str,
        name: str,
        msg: str,
        extras: Mapping[str, object],
        exc: str | None = None,
        stack: str | None = None,
    ) -> str:
        obj: dict[str, object] = {
            "ts": iso_utc(created),
            "level": levelname,
            "logger": name,
            "msg": msg,
        }
        for key in EXTRA_KEYS:
            value = extras.get(key)
            if value is not None:
                obj[key] = value
        if exc:
            obj["exc"] = exc
        if stack:
            obj["stack"] = stack
        # default=str: an odd extra (a Path, an enum) must not turn a log call into a crash.
        return json.dumps(obj, ensure_ascii=False, default=str)


class LineHandler(logging.StreamHandler[TextIO]):
    """The handler ``configure_logging`` installs: a ``StreamHandler`` that can also write
    a line straight from its fields (``write_line``), for brokers' per-job lines.

    Why: a broker logs a line per job right after starting the next command, when the
    machine's caches hold the command's exec and not Python's logging. Measured there
    (cmdstalk's drain benchmark), a line through ``Logger.log`` cost ~90 µs of CPU, the
    same line rendered and written directly ~40-50 µs, and every µs of it delays the job.
    Lines are rendered by the handler's formatter, which must then be a ``LineFormatter``
    (``sole_line_handler`` checks).
    """

    def __init__(self, stream: TextIO, formatter: LineFormatter) -> None:
        super().__init__(stream)
        self.setFormatter(formatter)

    def write_line(self, level: int, name: str, msg: str, extras: Mapping[str, object]) -> None:
        """What ``logging.getLogger(name).log(level, msg, extra=extras)`` writes here."""
        created = time.time()
        formatter = self.formatter
        assert isinstance(formatter, LineFormatter)
        try:
            line = formatter.render(
                created, logging.getLevelName(level), name, msg, extras
            )
            # StreamHandler.emit's write and flush, with the lock taken once, not twice,
            # and without the three Python-level calls around it.
            lock = self.lock
            assert lock is not None  # createLock() ran in Handler.__init__
            with lock:
                stream = self.stream
                stream.write(line + self.terminator)
                stream.flush()
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:
            record = logging.makeLogRecord({"name": name, "levelno": level, "msg": msg})
            record.levelname = logging.getLevelName(level)
            record.created = created
            self.handleError(record)


def sole_line_handler(logger: logging.Logger, level: int) -> LineHandler | None:
    """The ``LineHandler`` if it is all that would see ``logger``'s records at ``level``.

    Then ``write_line`` is what logging would do; with any filter, any other handler
    (pytest's capture, an embedding application's), a formatter that cannot render from
    fields, or no handler at all, None: log as usual. The caller has checked
    ``logger.isEnabledFor(level)``.
    """
    found: LineHandler | None = None
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters or node.disabled:
            return None
        for handler in node.handlers:
            if found is not None or not isinstance(handler, LineHandler):
                return None
            found = handler
        if not node.propagate:
            break
        node = node.parent
    if (
        found is None
        or found.filters
        or level < found.level
        or not isinstance(found.formatter, LineFormatter)
    ):
        return None
    return found


def make_formatter(fmt: str) -> LineFormatter:
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

    Replaces a handler installed by an earlier call; leaves other handlers (pytest's
    capture, an embedding application's) alone. Raises ValueError for an unknown format or level.
    """
    formatter = make_formatter(fmt)
    numeric = parse_level(level)
    handler = LineHandler(stream if stream is not None else sys.stderr, formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, LineHandler):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(numeric)


def lean_records() -> None:
    """Skip what log records compute but our formatters never show: the caller's file and
    line, thread and process names (the logging HOWTO's "Optimization" switches).

    Process-wide: for a process whose logging we own, i.e. the ``cmdstalk`` CLI, which
    logs a line per job.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
