"""The record codec: every binlog record's bytes, both ways, in one place.

The writer encodes with ``encode_put`` / ``encode_update`` / ``encode_delete``; replay
decodes a segment's records in one call with ``decode_records`` (the one decoder: a
million records must take seconds) and applies updates with ``apply_update``; recovery
checks a single frame with ``read_frame`` and finds the next intact one after damage
with ``find_next_frame``. No other module packs or unpacks a record. The segment file
header is ``header``'s.

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
#: A PUT frame's bytes besides the tube name and the body.
PUT_OVERHEAD = FRAME_SIZE + PUT_FIXED.size
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


#: One decoded record, told apart by its type: the ``JobRecord`` of a PUT, the fields of
#: an UPDATE as a plain tuple (id, pri, delay, state, deadline, 5 counters: see
#: :func:`apply_update`), or the job id (an int) of a DELETE. No wrapper per record: a
#: million extra tuples would keep the garbage collector busy during recovery.
Decoded = JobRecord | tuple[int, ...] | int


def decode_records(
    data: bytes, off: int, end: int, last_seq: int, tubes: dict[bytes, bytes]
) -> tuple[list[Decoded], int, str]:
    """Decode the intact records of ``data[off:end]`` that follow ``last_seq`` in sequence.

    Stops at the first other one: (records, its offset, reason), reason "" at ``end``,
    "seq" at an intact frame out of sequence, else what is wrong with it. ``tubes``
    shares one bytes object per tube name between the jobs decoded with it. One call per
    segment, with no Python-level call per record: this is the hot path of start-up.
    """
    mv = memoryview(data)
    out: list[Decoded] = []
    append = out.append
    unpack_frame = FRAME.unpack_from
    unpack_put = PUT_FIXED.unpack_from
    put_size = PUT_FIXED.size
    crc32 = zlib.crc32
    nstates = len(STATES)
    while off < end:
        if off + FRAME_SIZE > end:
            return out, off, _damage(mv, off, end)
        magic, crc, length, seq, rtype = unpack_frame(mv, off)
        stop = off + FRAME_SIZE + length
        if magic != FRAME_MAGIC or length > MAX_PAYLOAD or stop > end or (
            crc32(mv[off + CRC_START : stop]) != crc
        ):
            return out, off, _damage(mv, off, end)
        if seq != last_seq + 1:
            return out, off, "seq"
        p = off + FRAME_SIZE
        if rtype == T_PUT:
            if length < put_size:
                return out, off, "bad put record"
            (jid, pri, ttr, delay, st, created, deadline,
             r, t, rl, b, k, tlen, blen) = unpack_put(mv, p)  # fmt: skip
            if put_size + tlen + blen != length or st >= nstates:
                return out, off, "bad put record"
            q = p + put_size
            tube = data[q : q + tlen]
            tube = tubes.setdefault(tube, tube)
            # tuple.__new__ skips the NamedTuple's Python-level __new__.
            value: Decoded = _new_tuple(JobRecord, (jid, tube, data[q + tlen : stop], pri, ttr,
                                                delay, STATES[st], created, deadline,
                                                r, t, rl, b, k))  # fmt: skip
        elif rtype == T_UPDATE:
            fields = UPDATE_FIXED.unpack_from(mv, p) if length == UPDATE_FIXED.size else None
            if fields is None or fields[3] >= nstates:
                return out, off, "bad update record"
            value = fields
        elif rtype == T_DELETE:
            if length != DELETE_FIXED.size:
                return out, off, "bad delete record"
            value = DELETE_FIXED.unpack_from(mv, p)[0]
        else:
            return out, off, "unknown record type"
        append(value)
        last_seq = seq
        off = stop
    return out, off, ""


def _damage(buf: memoryview, off: int, end: int) -> str:
    # What read_frame finds wrong with a frame the fast checks above refused.
    head = read_frame(buf, off, end)
    assert isinstance(head, str), head
    return head


_new_tuple = tuple.__new__


def apply_update(rec: JobRecord, fields: tuple[int, ...]) -> JobRecord:
    """``rec`` with decoded UPDATE ``fields`` applied (``deadline`` is fields[4])."""
    _jid, pri, delay, st, deadline, r, t, rl, b, k = fields
    return _new_tuple(JobRecord, (rec[0], rec[1], rec[2], pri, rec[4], delay, STATES[st],
                                  rec[7], deadline, r, t, rl, b, k))  # fmt: skip


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
