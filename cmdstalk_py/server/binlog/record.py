"""The persisted job record and the payloads of the three mutation records.

``JobRecord`` holds exactly what rebuilds a job after a restart, nothing the server only
needs at run time (heap position, reserving connection, TTR timer). It is a ``NamedTuple``:
frozen, slotted, and built from a decoded struct without a Python-level ``__init__``, which
keeps recovery of a million jobs within seconds (a frozen dataclass costs ~4x more here).

Times are wall-clock epoch seconds so that "remaining delay counted from the original put"
survives a restart; the adapter converts to and from the engine's monotonic clock.

Mutations, each a self-contained payload (absolute values, never deltas, so applying one
twice is harmless even before sequence numbers rule it out):

* ``PUT``: the whole job, body included. Written for a new job and for a copy made by
  compaction or by re-logging after a failed fsync (it then replaces the job wholesale).
* ``UPDATE``: state, priority, delay, delay deadline and counters; no body, tube, TTR or
  creation time (those never change).
* ``DELETE``: the job id.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple


class JobState(enum.IntEnum):
    """States a job can be persisted in; a reserved job is persisted as ``READY``."""

    READY = 0
    DELAYED = 1
    BURIED = 2


# Index by the stored byte: cheaper than JobState(x) in the recovery loop.
STATES: tuple[JobState, ...] = (JobState.READY, JobState.DELAYED, JobState.BURIED)


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
    state: JobState
    created_at: float
    deadline: float
    reserves: int = 0
    timeouts: int = 0
    releases: int = 0
    buries: int = 0
    kicks: int = 0


class RecordType(enum.IntEnum):
    """The type byte of a framed record."""

    PUT = 1
    UPDATE = 2
    DELETE = 3


T_PUT = 1
T_UPDATE = 2
T_DELETE = 3

# id, pri, ttr, delay, state, created_at, deadline, 5 counters, tube length, body length;
# then the tube name and the body (bytes exactly as the server keeps them).
PUT_FIXED = struct.Struct("<QIIIBddIIIIIHI")
# id, pri, delay, state, deadline, 5 counters.
UPDATE_FIXED = struct.Struct("<QIIBdIIIII")
DELETE_FIXED = struct.Struct("<Q")

MAX_TUBE_BYTES = 0xFFFF


def put_parts(rec: JobRecord) -> tuple[bytes, bytes, bytes]:
    """The PUT payload as (fixed part, tube, body): framed without joining the body twice."""
    tube = rec.tube
    if len(tube) > MAX_TUBE_BYTES:
        raise ValueError(f"tube name too long for the binlog: {len(tube)} bytes")
    fixed = PUT_FIXED.pack(
        rec.id, rec.pri, rec.ttr, rec.delay, rec.state, rec.created_at, rec.deadline,
        rec.reserves, rec.timeouts, rec.releases, rec.buries, rec.kicks,
        len(tube), len(rec.body),
    )  # fmt: skip
    return fixed, tube, rec.body


def update_payload(rec: JobRecord) -> bytes:
    """The UPDATE payload: the mutable part of ``rec``."""
    return UPDATE_FIXED.pack(
        rec.id, rec.pri, rec.delay, rec.state, rec.deadline,
        rec.reserves, rec.timeouts, rec.releases, rec.buries, rec.kicks,
    )  # fmt: skip


def delete_payload(job_id: int) -> bytes:
    """The DELETE payload."""
    return DELETE_FIXED.pack(job_id)


def decode_put(buf: bytes | memoryview, start: int, length: int) -> JobRecord | None:
    """Decode a PUT payload at ``buf[start:start+length]``; None when inconsistent.

    The recovery loop inlines this for speed; this version serves tests and tools.
    """
    if length < PUT_FIXED.size:
        return None
    f = PUT_FIXED.unpack_from(buf, start)
    tube_len, body_len = f[12], f[13]
    if PUT_FIXED.size + tube_len + body_len != length or f[4] >= len(STATES):
        return None
    t0 = start + PUT_FIXED.size
    tube = bytes(buf[t0 : t0 + tube_len])
    body = bytes(buf[t0 + tube_len : t0 + tube_len + body_len])
    return JobRecord(
        f[0], tube, body, f[1], f[2], f[3], STATES[f[4]], f[5], f[6],
        f[7], f[8], f[9], f[10], f[11],
    )  # fmt: skip


def decode_update(buf: bytes | memoryview, start: int, length: int) -> tuple[int, ...] | None:
    """The fields of an UPDATE payload (id, pri, delay, state, deadline, 5 counters)."""
    if length != UPDATE_FIXED.size:
        return None
    fields: tuple[int, ...] = UPDATE_FIXED.unpack_from(buf, start)
    return None if fields[3] >= len(STATES) else fields


def apply_update(rec: JobRecord, fields: tuple[int, ...]) -> JobRecord:
    """``rec`` with decoded UPDATE ``fields`` applied (``deadline`` is fields[4])."""
    deadline: float = fields[4]
    return rec._replace(
        pri=fields[1], delay=fields[2], state=STATES[fields[3]], deadline=deadline,
        reserves=fields[5], timeouts=fields[6], releases=fields[7], buries=fields[8],
        kicks=fields[9],
    )  # fmt: skip


def put_size(rec: JobRecord) -> int:
    """Payload size of the PUT record for ``rec`` (without the frame header)."""
    return PUT_FIXED.size + len(rec.tube) + len(rec.body)
