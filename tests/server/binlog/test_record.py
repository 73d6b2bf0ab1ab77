"""Record payloads, frames and headers: pure functions, checked with hypothesis."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.server.binlog import JobRecord, JobState
from cmdstalk_py.server.binlog import frame as fr
from cmdstalk_py.server.binlog.record import (
    T_PUT,
    T_UPDATE,
    apply_update,
    decode_put,
    decode_update,
    put_parts,
    update_payload,
)

u32 = st.integers(0, 2**32 - 1)
times = st.floats(0, 4e9, allow_nan=False)
records = st.builds(
    JobRecord,
    id=st.integers(1, 2**63 - 1),
    tube=st.binary(min_size=1, max_size=200),
    body=st.binary(max_size=3000),
    pri=u32,
    ttr=u32,
    delay=u32,
    state=st.sampled_from(JobState),
    created_at=times,
    deadline=times,
    reserves=u32,
    timeouts=u32,
    releases=u32,
    buries=u32,
    kicks=u32,
)


@given(records)
def test_put_payload_round_trips(rec: JobRecord) -> None:
    payload = b"".join(put_parts(rec))
    assert decode_put(payload, 0, len(payload)) == rec
    assert decode_put(payload, 0, len(payload) - 1) is None


@given(records, records)
def test_update_payload_sets_only_the_mutable_fields(old: JobRecord, new: JobRecord) -> None:
    new = new._replace(id=old.id)
    fields = decode_update(update_payload(new), 0, len(update_payload(new)))
    assert fields is not None
    got = apply_update(old, fields)
    assert got == new._replace(tube=old.tube, body=old.body, ttr=old.ttr,
                               created_at=old.created_at)  # fmt: skip


@given(records, st.integers(1, 2**64 - 1))
def test_frames_validate_and_any_bit_flip_is_caught(rec: JobRecord, seq: int) -> None:
    data = fr.frame(seq, T_PUT, *put_parts(rec))
    mv = memoryview(data)
    found = fr.valid_frame_at(mv, 0, len(data))
    assert found == (len(data) - fr.FRAME_SIZE, seq, T_PUT)
    for bit in range(0, len(data) * 8, max(1, len(data) // 16)):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert fr.valid_frame_at(memoryview(bytes(flipped)), 0, len(data)) is None
    assert fr.valid_frame_at(mv, 0, len(data) - 1) is None


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_resync_finds_the_next_intact_frame_after_garbage(junk: bytes, tail: bytes) -> None:
    good = fr.frame(7, T_UPDATE, b"x" * 45)
    data = junk + good + tail
    pos = fr.find_next_frame(memoryview(data), data, 0, len(data))
    assert pos <= len(junk)  # never skips past the intact frame
    assert fr.valid_frame_at(memoryview(data), pos, len(data)) is not None


@given(st.integers(1, 2**32 - 1), st.integers(1, 2**64 - 1), st.integers(1, 2**64 - 1))
def test_segment_header_round_trips(number: int, base_seq: int, next_id: int) -> None:
    raw = fr.pack_segment_header(number, base_seq, next_id, fr.FLAG_AFTER_ABANDONED)
    assert len(raw) == fr.HEADER_SIZE
    status = fr.read_segment_header(raw)
    assert status.fault == ""
    assert status.header == fr.SegmentHeader(
        fr.FORMAT_VERSION, number, base_seq, next_id, fr.FLAG_AFTER_ABANDONED
    )


def test_header_faults_are_classified() -> None:
    raw = fr.pack_segment_header(3, 10, 20)
    assert fr.read_segment_header(b"").fault == "short"
    assert fr.read_segment_header(raw[:7]).fault == "short"
    assert fr.read_segment_header(b"\0" * 40).fault == "zero"
    assert fr.read_segment_header(struct.pack("<i", 7) + b"\0" * 60).fault == "foreign"
    damaged = bytearray(raw)
    damaged[12] ^= 4
    assert fr.read_segment_header(bytes(damaged)).fault == "crc"
    damaged = bytearray(raw)
    damaged[1] ^= 4  # in the magic: recognised as ours, header still usable
    status = fr.read_segment_header(bytes(damaged))
    assert status.fault == "magic" and status.header is not None
    head = fr.SEGMENT_HEADER.pack(fr.FILE_MAGIC, fr.FORMAT_VERSION + 1, 0, 3, 10, 20)
    newer = head + fr.HEADER_CRC.pack(zlib.crc32(head))
    assert fr.read_segment_header(newer).fault == "newer"
