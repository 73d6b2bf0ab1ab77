"""The on-disk format is frozen: bytes captured from the encoder before the codec existed.

A directory written by an older release must keep replaying, so these byte strings are
never regenerated: if one fails, the format changed (bump ``FORMAT_VERSION`` instead).
"""

from __future__ import annotations

from pathlib import Path

from cmdstalk_py.server.binlog import Binlog, BinlogOptions, JobRecord, StoredState
from cmdstalk_py.server.binlog.codec import encode_delete, encode_put, encode_update
from cmdstalk_py.server.binlog.header import pack_segment_header

# Segment 3, base sequence 7, next id floor 40.
HEADER = bytes.fromhex("4353424c0100000003000000070000000000000028000000000000008fdd7fe4")
# seq 7: job 42 in "emails", delayed, with every counter set.
PUT = bytes.fromhex(
    "dec01b5a1797e8934c0000000700000000000000012a00000000000000000400003c0000000500000001"
    "00001040fc54d94100005041fc54d9410100000002000000030000000400000005000000060007000000"
    "656d61696c7368656c6c6f0d0a"
)
# seq 8: job 42 buried.
UPDATE = bytes.fromhex(
    "dec01b5aa2caee512d0000000800000000000000022a000000000000000004000005000000020000000000"
    "0000000100000002000000030000000500000005000000"
)
# seq 9: job 42 deleted.
DELETE = bytes.fromhex("dec01b5a7b0a7b54080000000900000000000000032a00000000000000")

JOB = JobRecord(42, b"emails", b"hello\r\n", 1024, 60, 5, StoredState.DELAYED,
                1700000000.25, 1700000005.25, 1, 2, 3, 4, 5)  # fmt: skip
BURIED = JOB._replace(state=StoredState.BURIED, deadline=0.0, buries=5)


def test_encoder_writes_the_frozen_bytes() -> None:
    assert pack_segment_header(3, 7, 40) == HEADER
    assert encode_put(7, JOB) == PUT
    assert encode_update(8, BURIED) == UPDATE
    assert encode_delete(9, 42) == DELETE


def test_a_directory_of_frozen_bytes_replays(tmp_path: Path) -> None:
    (tmp_path / "binlog.3").write_bytes(HEADER + PUT + UPDATE)
    with Binlog(str(tmp_path), BinlogOptions(fsync_ms=None)) as log:
        assert log.recovery.clean, log.recovery.problems
        assert log.recovery.jobs == {42: BURIED}
        assert log.recovery.next_id == 43
    (tmp_path / "binlog.3").write_bytes(HEADER + PUT + UPDATE + DELETE)
    for extra in tmp_path.glob("binlog.[!3]*"):
        extra.unlink()
    with Binlog(str(tmp_path), BinlogOptions(fsync_ms=None)) as log:
        assert log.recovery.clean, log.recovery.problems
        assert log.recovery.jobs == {}
        assert log.recovery.next_id == 43
