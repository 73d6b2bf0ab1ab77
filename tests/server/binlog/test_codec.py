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
    UPDATE_FIXED,
    _frame,
    apply_update,
    decode_records,
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


def _one(data: bytes, seq: int) -> object:
    """The single record framed in ``data`` (sequence number ``seq``), decoded."""
    got, off, reason = decode_records(data, 0, len(data), seq - 1, {})
    assert (off, reason) == (len(data), ""), reason
    assert len(got) == 1
    return got[0]


def _payload_refused(seq: int, rtype: int, payload: bytes) -> str:
    """Why ``decode_records`` refuses an intact frame around a bad ``payload``."""
    data = _frame(seq, rtype, payload)
    got, off, reason = decode_records(data, 0, len(data), seq - 1, {})
    assert (got, off) == ([], 0)
    return reason


@given(records, st.integers(1, 2**64 - 1))
def test_put_round_trips(rec: JobRecord, seq: int) -> None:
    data = encode_put(seq, rec)
    _length, got_seq, rtype = _decoded(data)
    assert (got_seq, rtype) == (seq, T_PUT)
    assert _one(data, seq) == rec
    payload = data[FRAME_SIZE:]
    assert _payload_refused(seq, T_PUT, payload[:-1]) == "bad put record"


def test_put_shares_one_tube_name_between_jobs() -> None:
    data = b"".join(
        encode_put(i, JobRecord(i, b"mail", b"x", 0, 1, 0, StoredState.READY, 1.0, 0.0))
        for i in (1, 2)
    )
    (ra, rb), _off, _reason = decode_records(data, 0, len(data), 0, {})
    assert isinstance(ra, JobRecord) and isinstance(rb, JobRecord) and ra.tube is rb.tube


@given(records, records)
def test_update_sets_only_the_mutable_fields(old: JobRecord, new: JobRecord) -> None:
    new = new._replace(id=old.id)
    data = encode_update(5, new)
    _length, _seq, rtype = _decoded(data)
    assert rtype == T_UPDATE
    fields = _one(data, 5)
    assert isinstance(fields, tuple) and not isinstance(fields, JobRecord)
    assert fields[0] == old.id
    got = apply_update(old, fields)
    assert got == new._replace(tube=old.tube, body=old.body, ttr=old.ttr,
                               created_at=old.created_at)  # fmt: skip
    assert _payload_refused(5, T_UPDATE, data[FRAME_SIZE:-1]) == "bad update record"
    bad_state = UPDATE_FIXED.pack(1, 0, 0, 3, 0.0, 0, 0, 0, 0, 0)
    assert _payload_refused(5, T_UPDATE, bad_state) == "bad update record"


@given(st.integers(1, 2**64 - 1))
def test_delete_round_trips(job_id: int) -> None:
    data = encode_delete(9, job_id)
    _length, _seq, rtype = _decoded(data)
    assert rtype == T_DELETE
    assert _one(data, 9) == job_id
    assert _payload_refused(9, T_DELETE, data[FRAME_SIZE:] + b"x") == "bad delete record"


def test_a_segment_decodes_in_one_call_and_stops_where_replay_must() -> None:
    """Every record of a run in one call; it stops at damage, a sequence break or an
    unknown type, at that record's offset, with what ``read_frame`` says is wrong."""
    rec = JobRecord(7, b"t", b"body\r\n", 1, 2, 0, StoredState.READY, 1.0, 0.0)
    frames = [encode_put(1, rec), encode_update(2, rec), encode_delete(3, 7)]
    data = b"".join(frames)
    got, off, reason = decode_records(data, 0, len(data), 0, {})
    assert (len(got), off, reason) == (3, len(data), "")
    assert got[0] == rec and got[2] == 7
    first = len(frames[0])
    out_of_sequence = frames[0] + encode_delete(5, 7)
    assert decode_records(out_of_sequence, 0, len(out_of_sequence), 0, {})[1:] == (first, "seq")
    torn = data[:-1]
    assert decode_records(torn, 0, len(torn), 0, {})[1:] == (
        first + len(frames[1]), "frame runs past end of file"
    )
    unknown = frames[0] + _frame(2, 9, b"")
    assert decode_records(unknown, 0, len(unknown), 0, {})[1:] == (first, "unknown record type")


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
