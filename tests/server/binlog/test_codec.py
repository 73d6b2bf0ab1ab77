"""The record codec and the segment header: pure functions, checked with hypothesis."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.server.binlog import JobRecord, StoredState
from cmdstalk_py.server.binlog import header as fr
from cmdstalk_py.server.binlog.codec import (
    FRAME_SIZE,
    T_DELETE,
    T_PUT,
    T_UPDATE,
    apply_update,
    decode_delete,
    decode_put,
    decode_update,
    encode_delete,
    encode_put,
    encode_update,
    find_next_frame,
    read_frame,
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
    state=st.sampled_from(StoredState),
    created_at=times,
    deadline=times,
    reserves=u32,
    timeouts=u32,
    releases=u32,
    buries=u32,
    kicks=u32,
)


def _decoded(data: bytes) -> tuple[int, int, int]:
    head = read_frame(memoryview(data), 0, len(data))
    assert not isinstance(head, str), head
    assert FRAME_SIZE + head[0] == len(data)
    return head


@given(records, st.integers(1, 2**64 - 1))
def test_put_round_trips(rec: JobRecord, seq: int) -> None:
    data = encode_put(seq, rec)
    length, got_seq, rtype = _decoded(data)
    assert (got_seq, rtype) == (seq, T_PUT)
    assert decode_put(data, FRAME_SIZE, length) == rec
    assert decode_put(data, FRAME_SIZE, length - 1) is None


def test_put_shares_one_tube_name_between_jobs() -> None:
    tubes: dict[bytes, bytes] = {}
    a, b = (encode_put(i, JobRecord(i, b"mail", b"x", 0, 1, 0, StoredState.READY, 1.0, 0.0))
            for i in (1, 2))  # fmt: skip
    ra = decode_put(a, FRAME_SIZE, len(a) - FRAME_SIZE, tubes)
    rb = decode_put(b, FRAME_SIZE, len(b) - FRAME_SIZE, tubes)
    assert ra is not None and rb is not None and ra.tube is rb.tube


@given(records, records)
def test_update_sets_only_the_mutable_fields(old: JobRecord, new: JobRecord) -> None:
    new = new._replace(id=old.id)
    data = encode_update(5, new)
    length, _seq, rtype = _decoded(data)
    assert rtype == T_UPDATE
    fields = decode_update(data, FRAME_SIZE, length)
    assert fields is not None and fields[0] == old.id
    got = apply_update(old, fields)
    assert got == new._replace(tube=old.tube, body=old.body, ttr=old.ttr,
                               created_at=old.created_at)  # fmt: skip
    assert decode_update(data, FRAME_SIZE, length - 1) is None


@given(st.integers(1, 2**64 - 1))
def test_delete_round_trips(job_id: int) -> None:
    data = encode_delete(9, job_id)
    length, _seq, rtype = _decoded(data)
    assert rtype == T_DELETE
    assert decode_delete(data, FRAME_SIZE, length) == job_id
    assert decode_delete(data, FRAME_SIZE, length + 1) is None


@given(records, st.integers(1, 2**64 - 1))
def test_frames_validate_and_any_bit_flip_is_caught(rec: JobRecord, seq: int) -> None:
    data = encode_put(seq, rec)
    mv = memoryview(data)
    for bit in range(0, len(data) * 8, max(1, len(data) // 16)):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert isinstance(read_frame(memoryview(bytes(flipped)), 0, len(data)), str)
    assert read_frame(mv, 0, len(data) - 1) == "frame runs past end of file"
    assert read_frame(mv, 0, FRAME_SIZE - 1) == "short frame header"


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_resync_finds_the_next_intact_frame_after_garbage(junk: bytes, tail: bytes) -> None:
    good = encode_delete(7, 45)
    data = junk + good + tail
    pos = find_next_frame(memoryview(data), data, 0, len(data))
    assert pos <= len(junk)  # never skips past the intact frame
    assert not isinstance(read_frame(memoryview(data), pos, len(data)), str)


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
