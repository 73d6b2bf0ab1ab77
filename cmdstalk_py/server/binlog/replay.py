"""The replay loop: applying intact records to the jobs and the live-job index.

This is the hot path of start-up (a million records must take seconds): one read per
segment, ``struct.unpack_from`` on a memoryview, CRC over a memoryview slice, tuple
construction without a Python ``__init__``, locals instead of attribute lookups. It stops
at the first record that is damaged or out of sequence and lets ``recovery`` decide what
that means (a tear to cut, damage to skip, a stale record, a gap).
"""

from __future__ import annotations

import logging
import zlib

from cmdstalk_py.server.binlog.errors import Problem
from cmdstalk_py.server.binlog.frame import CRC_START, FRAME, FRAME_MAGIC, FRAME_SIZE
from cmdstalk_py.server.binlog.record import (
    DELETE_FIXED,
    PUT_FIXED,
    STATES,
    T_DELETE,
    T_PUT,
    T_UPDATE,
    UPDATE_FIXED,
    JobRecord,
)
from cmdstalk_py.server.binlog.segment import HOME_SHIFT, SIZE_MASK, SegmentMeta

log = logging.getLogger("cmdstalk_py.server.binlog")


class Replayer:
    """Replay state across segments: jobs, each live job's home, per-segment accounting."""

    def __init__(self) -> None:
        self.jobs: dict[int, JobRecord] = {}
        self.home: dict[int, int] = {}
        self.segments: dict[int, SegmentMeta] = {}
        # One bytes object per tube name, shared by all its jobs.
        self.tubes: dict[bytes, bytes] = {}
        self.last_seq = 0
        self.max_id = 0
        self.id_floor = 1
        self.live_bytes = 0
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
        jobs = self.jobs
        home = self.home
        ids = meta.ids
        segments = self.segments
        tubes = self.tubes
        unpack_frame = FRAME.unpack_from
        unpack_put = PUT_FIXED.unpack_from
        unpack_update = UPDATE_FIXED.unpack_from
        unpack_delete = DELETE_FIXED.unpack_from
        put_size = PUT_FIXED.size
        update_size = UPDATE_FIXED.size
        delete_size = DELETE_FIXED.size
        crc32 = zlib.crc32
        new = tuple.__new__
        record_cls = JobRecord
        states = STATES
        nstates = len(STATES)
        seg_key = meta.number << HOME_SHIFT
        last = self.last_seq
        max_id = self.max_id
        live = meta.live
        live_bytes = self.live_bytes
        records = 0
        orphans = 0
        reason = ""
        while off < end:
            if off + FRAME_SIZE > end:
                reason = "short frame header"
                break
            magic, crc, length, seq, rtype = unpack_frame(mv, off)
            stop = off + FRAME_SIZE + length
            if magic != FRAME_MAGIC:
                reason = "bad frame magic"
                break
            if stop > end:
                reason = "frame runs past end of file"
                break
            if crc32(mv[off + CRC_START : stop]) != crc:
                reason = "checksum mismatch"
                break
            if seq != last + 1:
                reason = "seq"
                break
            p = off + FRAME_SIZE
            if rtype == T_PUT:
                if length < put_size:
                    reason = "bad put record"
                    break
                (jid, pri, ttr, delay, st, created, deadline,
                 r, t, rl, b, k, tlen, blen) = unpack_put(mv, p)  # fmt: skip
                if put_size + tlen + blen != length or st >= nstates:
                    reason = "bad put record"
                    break
                q = p + put_size
                tkey = data[q : q + tlen]
                tube = tubes.setdefault(tkey, tkey)
                size = stop - off
                old = home.get(jid)
                if old is not None:  # a copy (compaction, re-log) replacing the job
                    live_bytes -= old & SIZE_MASK
                    if old >> HOME_SHIFT == meta.number:
                        live -= 1
                    else:
                        segments[old >> HOME_SHIFT].live -= 1
                jobs[jid] = new(record_cls, (
                    jid, tube, data[q + tlen : stop], pri, ttr, delay, states[st],
                    created, deadline, r, t, rl, b, k,
                ))  # fmt: skip
                home[jid] = seg_key | size
                ids.append(jid)
                live += 1
                live_bytes += size
                if jid > max_id:
                    max_id = jid
            elif rtype == T_UPDATE:
                if length != update_size:
                    reason = "bad update record"
                    break
                jid, pri, delay, st, deadline, r, t, rl, b, k = unpack_update(mv, p)
                if st >= nstates:
                    reason = "bad update record"
                    break
                rec = jobs.get(jid)
                if rec is None:
                    orphans += 1
                else:
                    jobs[jid] = new(record_cls, (
                        jid, rec[1], rec[2], pri, rec[4], delay, states[st],
                        rec[7], deadline, r, t, rl, b, k,
                    ))  # fmt: skip
            elif rtype == T_DELETE:
                if length != delete_size:
                    reason = "bad delete record"
                    break
                (jid,) = unpack_delete(mv, p)
                old = home.pop(jid, None)
                if old is None:
                    orphans += 1
                else:
                    del jobs[jid]
                    live_bytes -= old & SIZE_MASK
                    if old >> HOME_SHIFT == meta.number:
                        live -= 1
                    else:
                        segments[old >> HOME_SHIFT].live -= 1
            else:
                reason = "unknown record type"
                break
            last = seq
            off = stop
            records += 1
        self.last_seq = last
        self.max_id = max_id
        meta.live = live
        self.live_bytes = live_bytes
        self.records += records
        self.orphans += orphans
        return off, reason
