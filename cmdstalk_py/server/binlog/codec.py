"""The record codec: every binlog record's bytes, both ways, in one place.

The writer encodes with ``encode_put`` / ``encode_update`` / ``encode_delete``; replay
reads with ``read_frame`` and ``decode_put`` / ``decode_update`` / ``decode_delete``;
recovery finds the next intact frame after damage with ``find_next_frame``. No other
module packs or unpacks a record. The segment file header is ``segment``'s.

Frame (all integers little-endian)::

    magic u32 | crc u32 | length u32 | seq u64 | type u8 | payload (length bytes)

``crc`` is zlib's CRC32 over everything after it (length, seq, type, payload), so a torn or
flipped length, sequence number or type is caught like a damaged payload. ``magic`` lets
recovery find the next frame after damage in an older segment with ``bytes.find`` instead
of trying every offset in Python. Sequence numbers increase by exactly one per record
across the whole log, so recovery knows how many records a damaged stretch held.

Payloads, each self-contained (absolute values, never deltas, so applying one twice is
harmless even before sequence numbers rule it out):

* ``PUT``: the whole job, body included. Written for a new job and for a copy made by
  compaction or by re-logging after a failed fsync (it then replaces the job wholesale).
* ``UPDATE``: state, priority, delay, delay deadline and counters; no body, tube, TTR or
  creation time (those never change).
* ``DELETE``: the job id.
"""

from __future__ import annotations

import enum
import struct
import zlib

from cmdstalk_py.server.binlog.record import STATES, JobRecord


class RecordType(enum.IntEnum):
    """The type byte of a framed record."""

    PUT = 1
    UPDATE = 2
    DELETE = 3


T_PUT = RecordType.PUT.value
T_UPDATE = RecordType.UPDATE.value
T_DELETE = RecordType.DELETE.value

FRAME_MAGIC = 0x5A1BC0DE
FRAME_MAGIC_BYTES = struct.pack("<I", FRAME_MAGIC)
FRAME_HEAD = struct.Struct("<II")  # magic, crc
FRAME_TAIL = struct.Struct("<IQB")  # length, seq, type: covered by the crc
FRAME = struct.Struct("<IIIQB")  # the two above in one, for reading
FRAME_SIZE = FRAME.size  # 21
CRC_START = FRAME_HEAD.size  # the crc covers frame bytes from here on

# A sane upper bound for one payload: a job body plus its fixed fields. Larger lengths are
# damage, not data (beanstalkd caps bodies at 2^32-1 but nobody logs gigabyte jobs).
MAX_PAYLOAD = 1 << 31

# id, pri, ttr, delay, state, created_at, deadline, 5 counters, tube length, body length;
# then the tube name and the body (bytes exactly as the server keeps them).
PUT_FIXED = struct.Struct("<QIIIBddIIIIIHI")
# id, pri, delay, state, deadline, 5 counters.
UPDATE_FIXED = struct.Struct("<QIIBdIIIII")
DELETE_FIXED = struct.Struct("<Q")

MAX_TUBE_BYTES = 0xFFFF

# ------------------------------------------------------------------ encoding


def _frame(seq: int, rtype: int, *parts: bytes) -> bytes:
    # The payload's parts are checksummed one by one: a body is never copied to be framed.
    length = sum(map(len, parts))
    tail = FRAME_TAIL.pack(length, seq, rtype)
    crc = zlib.crc32(tail)
    for part in parts:
        crc = zlib.crc32(part, crc)
    return b"".join((FRAME_HEAD.pack(FRAME_MAGIC, crc), tail, *parts))


def encode_put(seq: int, rec: JobRecord) -> bytes:
    """The framed PUT record of ``rec`` (ValueError: tube name too long)."""
    tube = rec.tube
    if len(tube) > MAX_TUBE_BYTES:
        raise ValueError(f"tube name too long for the binlog: {len(tube)} bytes")
    fixed = PUT_FIXED.pack(
        rec.id, rec.pri, rec.ttr, rec.delay, rec.state, rec.created_at, rec.deadline,
        rec.reserves, rec.timeouts, rec.releases, rec.buries, rec.kicks,
        len(tube), len(rec.body),
    )  # fmt: skip
    return _frame(seq, T_PUT, fixed, tube, rec.body)


def encode_update(seq: int, rec: JobRecord) -> bytes:
    """The framed UPDATE record of ``rec``: its mutable fields only."""
    payload = UPDATE_FIXED.pack(
        rec.id, rec.pri, rec.delay, rec.state, rec.deadline,
        rec.reserves, rec.timeouts, rec.releases, rec.buries, rec.kicks,
    )  # fmt: skip
    return _frame(seq, T_UPDATE, payload)


def encode_delete(seq: int, job_id: int) -> bytes:
    """The framed DELETE record of ``job_id``."""
    return _frame(seq, T_DELETE, DELETE_FIXED.pack(job_id))


# ------------------------------------------------------------------ decoding


def read_frame(buf: memoryview, off: int, end: int) -> tuple[int, int, int] | str:
    """(length, seq, type) of the intact frame at ``off``, else what is wrong with it."""
    if off + FRAME_SIZE > end:
        return "short frame header"
    magic, crc, length, seq, rtype = FRAME.unpack_from(buf, off)
    stop = off + FRAME_SIZE + length
    if magic != FRAME_MAGIC:
        return "bad frame magic"
    if length > MAX_PAYLOAD or stop > end:
        return "frame runs past end of file"
    if zlib.crc32(buf[off + CRC_START : stop]) != crc:
        return "checksum mismatch"
    return length, seq, rtype


def decode_put(
    data: bytes, start: int, length: int, tubes: dict[bytes, bytes] | None = None
) -> JobRecord | None:
    """The PUT payload at ``data[start:start+length]``; None when inconsistent.

    ``tubes``: share one bytes object per tube name between the jobs decoded with it.
    """
    if length < PUT_FIXED.size:
        return None
    (jid, pri, ttr, delay, st, created, deadline,
     r, t, rl, b, k, tlen, blen) = PUT_FIXED.unpack_from(data, start)  # fmt: skip
    if PUT_FIXED.size + tlen + blen != length or st >= len(STATES):
        return None
    t0 = start + PUT_FIXED.size
    tube = data[t0 : t0 + tlen]
    if tubes is not None:
        tube = tubes.setdefault(tube, tube)
    # tuple.__new__ skips the NamedTuple's Python-level __new__: recovery builds one
    # record per PUT it reads (benchmarks/README.md, recovery of a million jobs).
    body = data[t0 + tlen : t0 + tlen + blen]
    return _new_tuple(JobRecord, (jid, tube, body, pri, ttr, delay, STATES[st], created,
                                  deadline, r, t, rl, b, k))  # fmt: skip


_new_tuple = tuple.__new__


def decode_update(data: bytes | memoryview, start: int, length: int) -> tuple[int, ...] | None:
    """The fields of the UPDATE payload at ``start`` (id, pri, delay, state, deadline,
    5 counters; see :func:`apply_update`); None when inconsistent."""
    if length != UPDATE_FIXED.size:
        return None
    fields: tuple[int, ...] = UPDATE_FIXED.unpack_from(data, start)
    return None if fields[3] >= len(STATES) else fields


def apply_update(rec: JobRecord, fields: tuple[int, ...]) -> JobRecord:
    """``rec`` with decoded UPDATE ``fields`` applied (``deadline`` is fields[4])."""
    _jid, pri, delay, st, deadline, r, t, rl, b, k = fields
    return rec._replace(pri=pri, delay=delay, state=STATES[st], deadline=deadline,
                        reserves=r, timeouts=t, releases=rl, buries=b, kicks=k)  # fmt: skip


def decode_delete(data: bytes | memoryview, start: int, length: int) -> int | None:
    """The job id of the DELETE payload at ``start`` (None when inconsistent)."""
    if length != DELETE_FIXED.size:
        return None
    jid: int = DELETE_FIXED.unpack_from(data, start)[0]
    return jid


def find_next_frame(buf: memoryview, data: bytes, start: int, end: int) -> int:
    """Offset of the first intact frame at or after ``start``, or ``end`` if none.

    ``data`` is the bytes object behind ``buf`` (for the fast ``find``).
    """
    pos = start
    while True:
        pos = data.find(FRAME_MAGIC_BYTES, pos, end)
        if pos < 0:
            return end
        if not isinstance(read_frame(buf, pos, end), str):
            return pos
        pos += 1
