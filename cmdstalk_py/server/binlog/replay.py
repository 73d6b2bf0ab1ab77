"""The replay loop: applying intact records to the jobs and the live-job index.

It decodes a segment's records with the ``codec`` in one call (``decode_records``) and
counts live jobs with ``LiveIndex``, like the writer. It stops at the first record that
is damaged or out of sequence and lets
``recovery`` decide what that means (a tear to cut, damage to skip, a stale record, a
gap).
"""

from __future__ import annotations

import logging
from typing import Any

from cmdstalk_py.server.binlog.codec import PUT_OVERHEAD, apply_update, decode_records
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
        records, off, reason = decode_records(data, off, end, self.last_seq, self.tubes)
        jobs = self.jobs
        place = self.index.place
        drop = self.index.drop
        max_id = self.max_id
        orphans = 0
        overhead = PUT_OVERHEAD
        value: Any  # told apart by type, see codec.Decoded
        for value in records:
            kind = type(value)
            if kind is JobRecord:
                jid = value.id
                jobs[jid] = value
                place(jid, meta, overhead + len(value[1]) + len(value[2]))
                if jid > max_id:
                    max_id = jid
            elif kind is int:  # DELETE
                if drop(value):
                    del jobs[value]
                else:
                    orphans += 1
            else:  # UPDATE
                old = jobs.get(value[0])
                if old is None:
                    orphans += 1
                else:
                    jobs[old.id] = apply_update(old, value)
        self.max_id = max_id
        self.orphans += orphans
        self.last_seq += len(records)
        self.records += len(records)
        return off, reason
