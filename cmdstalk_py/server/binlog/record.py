"""The persisted job record: what rebuilds a job after a restart (its bytes: ``codec``).

``JobRecord`` holds exactly what rebuilds a job after a restart, nothing the server only
needs at run time (heap position, reserving connection, TTR timer). It is a ``NamedTuple``:
frozen, slotted and cheap to build, which matters when recovery rebuilds a million jobs.

Times are wall-clock epoch seconds so that "remaining delay counted from the original put"
survives a restart; the adapter converts to and from the engine's monotonic clock.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import NamedTuple


class StoredState(enum.IntEnum):
    """States a job can be persisted in; a reserved job is persisted as ``READY``."""

    READY = 0
    DELAYED = 1
    BURIED = 2


# Index by the stored state byte.
STATES: tuple[StoredState, ...] = (StoredState.READY, StoredState.DELAYED, StoredState.BURIED)


class JobRecord(NamedTuple):
    """Everything needed to rebuild one job (a small frozen value).

    ``tube`` and ``body`` are bytes as the server keeps them (the bundled server keeps the
    body's trailing CRLF, as beanstalkd logs it; the binlog does not care).

    ``deadline`` is the epoch second a delayed job becomes ready (0.0 unless delayed);
    ``delay`` and ``ttr`` are whole seconds as given by the client.
    """

    id: int
    tube: bytes
    body: bytes
    pri: int
    ttr: int
    delay: int
    state: StoredState
    created_at: float
    deadline: float
    reserves: int = 0
    timeouts: int = 0
    releases: int = 0
    buries: int = 0
    kicks: int = 0


Lookup = Callable[[int], JobRecord | None]
"""The current state of a job as the server knows it (None if it no longer exists)."""
