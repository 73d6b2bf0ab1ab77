"""The replay loop: applying intact records to the jobs and the live-job index.

It reads every record with the ``codec`` and counts live jobs with ``LiveIndex``, like
the writer. It stops at the first record that is damaged or out of sequence and lets
``recovery`` decide what that means (a tear to cut, damage to skip, a stale record, a
gap).
"""

from __future__ import annotations

import logging

from cmdstalk_py.server.binlog.codec import (
    FRAME_SIZE,
    T_DELETE,
    T_PUT,
    T_UPDATE,
    apply_update,
    decode_delete,
    decode_put,
    decode_update,
    read_frame,
)
from cmdstalk_py.server.binlog.errors import Problem
from cmdstalk_py.server.binlog.record import JobRecord
from cmdstalk_py.server.binlog.segment import LiveIndex, SegmentMeta

log = logging.getLogger("cmdstalk_py.server.binlog")


class Replayer:
    """Replay state across segments: jobs, each live job's home, per-segment accounting."""

    def __init__(self) -> None:
        self.jobs: dict[int, JobRecord] = {}
        self.index = LiveIndex()
        # One bytes object per tube name, shared by all its jobs.
        self.tubes: dict[bytes, bytes] = {}
        self.last_seq = 0
        self.max_id = 0
        self.id_floor = 1
        self.records = 0
        self.orphans = 0
        self.problems: list[Problem] = []

    def problem(self, kind: str, path: str, offset: int, size: int, detail: str) -> None:
        p = Problem(kind, path, offset, size, detail)
        self.problems.append(p)
        log.warning("binlog recovery: %s", p)

    def run(self, meta: SegmentMeta, data: bytes, off: int, end: int) -> tuple[int, str]:
        """Apply intact, in-sequence records from ``off``; stop at the first other one.

        Returns (offset reached, reason): reason is "" at ``end``, "seq" at an intact
        record whose sequence number is not the next one, else the kind of damage.
        """
        mv = memoryview(data)
        reason = ""
        while off < end:
            head = read_frame(mv, off, end)
            if isinstance(head, str):
                reason = head
                break
            length, seq, rtype = head
            if seq != self.last_seq + 1:
                reason = "seq"
                break
            reason = self._apply(meta, data, rtype, off, length)
            if reason:
                break
            self.last_seq = seq
            off += FRAME_SIZE + length
            self.records += 1
        return off, reason

    def _apply(self, meta: SegmentMeta, data: bytes, rtype: int, off: int, length: int) -> str:
        """Apply the record of ``rtype`` framed at ``off``; "" or what is wrong with it."""
        start = off + FRAME_SIZE
        if rtype == T_PUT:
            rec = decode_put(data, start, length, self.tubes)
            if rec is None:
                return "bad put record"
            self.jobs[rec.id] = rec
            self.index.place(rec.id, meta, FRAME_SIZE + length)
            if rec.id > self.max_id:
                self.max_id = rec.id
        elif rtype == T_UPDATE:
            fields = decode_update(data, start, length)
            if fields is None:
                return "bad update record"
            old = self.jobs.get(fields[0])
            if old is None:
                self.orphans += 1
            else:
                self.jobs[old.id] = apply_update(old, fields)
        elif rtype == T_DELETE:
            jid = decode_delete(data, start, length)
            if jid is None:
                return "bad delete record"
            if self.index.drop(jid):
                del self.jobs[jid]
            else:
                self.orphans += 1
        else:
            return "unknown record type"
        return ""
