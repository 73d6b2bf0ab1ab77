"""One line for a Spark failure: the cause a user can act on, not the JVM and Python traces.

A failure inside a Spark job reaches the driver wrapped several times (a Py4J error holding
the JVM's trace, whose innermost ``Caused by`` holds the Python worker's traceback, whose
last line is our own exception). :func:`cause_line` digs out the innermost message; the CLI
prints it, and the whole trace only with ``--debug``.
"""

from __future__ import annotations

import re

# A traceback's last line ("pkg.mod.PutFailed: message") or a JVM cause line.
_PY_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Failed|Lost|Exit): (.+)$")
_CAUSED_BY = "Caused by: "
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\.?\s*$")
_JVM_CLASS = re.compile(r"^(?:[a-z_]\w*\.)+[A-Z]\w*: ")
_WRAPPERS = (
    "Job aborted due to stage failure",
    "An error occurred while calling",
    "An exception was thrown from the Python worker",
    "[FAILED_READ_FILE",
    "[TASK_WRITE_FAILED]",
)


def cause_line(exc: BaseException, limit: int = 400) -> str:
    """The innermost meaningful message of ``exc`` (and its causes), on one line."""
    best = ""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        line = _innermost(str(current))
        if line:
            best = line
        current = current.__cause__
    if not best:
        best = type(exc).__name__
    return best if len(best) <= limit else best[: limit - 3] + "..."


def _innermost(text: str) -> str:
    candidates: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(_CAUSED_BY):
            line = line[len(_CAUSED_BY) :]
        elif line.startswith(": "):
            line = line[2:]
        match = _PY_EXC.match(line)
        if match and not line.startswith(("py4j.", "java.lang.reflect")):
            candidates.append(_clean(line))
    useful = [c for c in candidates if c and not c.startswith(_WRAPPERS)]
    if useful:
        return useful[-1]
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return _clean(first)


def _clean(line: str) -> str:
    line = _JVM_CLASS.sub("", line)
    match = _PY_EXC.match(line)
    if match:
        line = match.group(1)
    return _SQLSTATE.sub("", line).strip()
