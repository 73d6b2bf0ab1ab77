"""The segment file header: format version, segment number, where the log stands.

Segment file ``binlog.N`` (all integers little-endian)::

    offset 0  magic "CSBL" (4) | version u16 | flags u16 | segment number u32
              | base sequence u64 | next job id floor u64 | CRC32 of the 28 bytes before (u32)
    offset 32 frame, frame, ... (see ``codec``)

The format is versioned from the first bytes of every file: a reader refuses a newer
version or a foreign file (a beanstalkd ``binlog.N`` starts with the int 7) instead of
"repairing" it. ``base sequence`` is the sequence number of the segment's first record and
``next job id floor`` the smallest job id not yet used when the segment was created, so ids
never repeat even after every record mentioning the highest id has been compacted away.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

FILE_MAGIC = b"CSBL"
FORMAT_VERSION = 1

SEGMENT_HEADER = struct.Struct("<4sHHIQQ")
HEADER_CRC = struct.Struct("<I")
HEADER_SIZE = SEGMENT_HEADER.size + HEADER_CRC.size  # 32

# Header flag: the previous segment was abandoned after a write or fsync error; records
# at its end may be missing or superseded by copies re-logged at the start of this one,
# and one sequence number was skipped so that a half-written record there can never
# collide with one here.
FLAG_AFTER_ABANDONED = 1


class SegmentHeader(NamedTuple):
    """The decoded header of one segment file."""

    version: int
    number: int
    base_seq: int
    next_id: int
    flags: int = 0


def pack_segment_header(number: int, base_seq: int, next_id: int, flags: int = 0) -> bytes:
    """The 32-byte header of segment ``number``."""
    head = SEGMENT_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, flags, number, base_seq, next_id)
    return head + HEADER_CRC.pack(zlib.crc32(head))


class HeaderStatus(NamedTuple):
    """Outcome of reading a header: ``header`` when valid, else why not (``fault``).

    ``fault`` is one of ``short`` (file shorter than a header), ``zero`` (all zero bytes:
    created but never written), ``foreign`` (not our magic), ``newer`` (a version this
    code cannot read), ``crc`` (our magic but damaged), ``magic`` (only the magic is
    damaged: ``header`` is valid), or "" when all is well.
    """

    header: SegmentHeader | None
    fault: str


def read_segment_header(buf: bytes) -> HeaderStatus:
    """Classify and decode the first bytes of a segment file."""
    if len(buf) < HEADER_SIZE:
        if buf.strip(b"\0") == b"" or FILE_MAGIC.startswith(buf[:4]):
            return HeaderStatus(None, "short")
        return HeaderStatus(None, "foreign")
    raw = buf[:HEADER_SIZE]
    if raw.count(0) == HEADER_SIZE:
        return HeaderStatus(None, "zero")
    magic, version, flags, number, base_seq, next_id = SEGMENT_HEADER.unpack_from(raw)
    (crc,) = HEADER_CRC.unpack_from(raw, SEGMENT_HEADER.size)
    fault = ""
    if magic != FILE_MAGIC:
        # Our header with a damaged magic still checks out once the magic is put back:
        # a flipped bit must not make recovery refuse the directory as foreign.
        if crc != zlib.crc32(FILE_MAGIC + raw[4 : SEGMENT_HEADER.size]):
            return HeaderStatus(None, "foreign")
        fault = "magic"
    elif crc != zlib.crc32(raw[: SEGMENT_HEADER.size]):
        return HeaderStatus(None, "crc")
    header = SegmentHeader(version, number, base_seq, next_id, flags)
    if version > FORMAT_VERSION:
        return HeaderStatus(header, "newer")
    return HeaderStatus(header, fault)
