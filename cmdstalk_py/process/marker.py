"""The run marker: an environment variable that names the command run a process belongs to.

Every command gets ``CMDSTALK_RUN=<supervisor pid>-<sequence>`` in its environment, and
every process it starts inherits it, including those that leave its process group
(``setsid``, a double fork) and so escape ``killpg`` and, once their parent has exited,
the command's process tree. The supervisor is a child subreaper, so such an orphan becomes
*its* child: ``marked_descendants`` finds it among the supervisor's descendants by its
marker, and the kill reaches it. The sentinel (``sentinel.py``) finds them the same way
across the whole system once the supervisor is gone.

A process that replaces its environment (``env -i``, ``sudo`` without ``-E``) drops the
marker; it is still found while it stays in the command's group or below the command.
"""

from __future__ import annotations

import itertools
import os

import psutil

MARKER = "CMDSTALK_RUN"
_sequence = itertools.count(1)


def new_token() -> str:
    """A marker value unique among this supervisor's runs (and, by the pid, across hosts'
    concurrent supervisors while this one lives)."""
    return f"{os.getpid()}-{next(_sequence)}"


def environ_token(pid: int) -> str | None:
    """The marker in ``pid``'s environment (as of its last exec), or None (none, gone,
    not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    prefix = MARKER.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("ascii", "replace")
    return None


def marked_descendants(token: str) -> list[psutil.Process]:
    """Live descendants of this process whose marker is ``token`` (a /proc scan: kill path only)."""
    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in procs if environ_token(p.pid) == token]
