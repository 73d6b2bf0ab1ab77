"""Compaction: when to reclaim space (pure functions of the log's accounting), and the
bounded maintenance step that does it (``Binlog.maintain`` runs one per ``tick``).

How it works:

1. A segment whose live-job count is zero and which is the oldest one is simply removed
   (after the current segment is fsynced). In a queue, where jobs are deleted roughly in
   the order they were put, this is nearly all the reclaiming there is: no copying.
2. When a few long-lived jobs pin old segments and the files hold more than
   ``ratio`` times the bytes the live jobs need, the live jobs homed in the oldest
   segment are copied, a bounded number per step, as full PUT records appended to the
   current segment, in log order like any other record. When none is left there, step 1
   removes the segment.

Why this is crash-safe at every step, and why it avoids the two classic defects:

* There is no separate snapshot file, so no "snapshot written, old logs not yet deleted"
  window in which old mutations replay on top of newer state: a copy is just a later
  record, and every mutation after it is later still. Replay applies records in sequence
  order; a copy replaces the job with the state it had at copy time, exactly the state
  the records before it produce, so a crash with both original and copy on disk
  recovers the same jobs.
* Nothing is ever overwritten in place: a crash while copying leaves a torn tail in the
  newest segment (cut by recovery) with the originals intact.
* The oldest segment is unlinked only after the copies are fsynced, and segments are
  removed oldest first, so the remaining files are always a suffix of the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from cmdstalk_py.server.binlog.errors import BinlogError, describe_oserror

if TYPE_CHECKING:
    from cmdstalk_py.server.binlog.options import BinlogOptions
    from cmdstalk_py.server.binlog.record import Lookup
    from cmdstalk_py.server.binlog.segment import SegmentMeta
    from cmdstalk_py.server.binlog.writer import SegmentWriter

log = logging.getLogger("cmdstalk_py.server.binlog")

#: Segments removed per maintenance step at most (each unlink is a metadata write).
UNLINKS_PER_STEP = 4


def should_compact(total_bytes: int, live_bytes: int, sealed_segments: int, ratio: float) -> bool:
    """True when copying live jobs out of the oldest segment is worth it.

    ``sealed_segments`` counts segments other than the one being written: the one being
    written is never compacted (it would copy jobs into itself).
    """
    return sealed_segments > 0 and total_bytes > ratio * live_bytes


def removable(oldest_live: int, oldest_is_current: bool) -> bool:
    """True when the oldest segment holds no live job and can be unlinked."""
    return oldest_live == 0 and not oldest_is_current


def compaction_due(w: SegmentWriter, lookup: Lookup | None, ratio: float) -> bool:
    """True when live jobs should be copied out of the oldest segment (needs a lookup)."""
    sealed = len(w.index.segments) - 1
    return lookup is not None and should_compact(
        w.total_bytes(), w.index.live_bytes, sealed, ratio
    )


def maintenance_pending(w: SegmentWriter, lookup: Lookup | None, options: BinlogOptions) -> (
    bool
):
    """True when :func:`maintenance_step` has something to do."""
    oldest = w.oldest()
    return (
        w.wants_extension()
        or removable(oldest.live, oldest is w.active)
        or w.has_empty_sealed()
        or compaction_due(w, lookup, options.compact_ratio)
    )


def maintenance_step(
    w: SegmentWriter, lookup: Lookup | None, options: BinlogOptions, sync: Callable[[], None]
) -> None:
    """Remove segments no live job needs, then copy a bounded number of live jobs out of
    the oldest one. ``sync`` makes the copies durable before their originals go.
    Raises BinlogError (the caller backs off and retries)."""
    for _ in range(UNLINKS_PER_STEP):
        oldest = w.oldest()
        if not removable(oldest.live, oldest is w.active):
            break
        # Copies out of this segment must be durable before it goes.
        if w.durable:
            sync()
        _remove(w, oldest)
    for seg in w.empty_sealed()[:UNLINKS_PER_STEP]:
        _remove(w, seg)
    if lookup is not None and compaction_due(w, lookup, options.compact_ratio):
        compact_step(w, lookup, options.compact_budget)


def _remove(w: SegmentWriter, seg: SegmentMeta) -> None:
    try:
        w.remove(seg)
    except OSError as exc:
        raise BinlogError(describe_oserror("cannot remove", seg.path, exc)) from exc


def compact_step(w: SegmentWriter, lookup: Lookup, budget: int) -> int:
    """Copy up to ``budget`` live jobs out of the oldest segment; returns the count.

    Bounded work (at most ``8 * budget`` index entries examined), so the event loop
    stays responsive with millions of jobs. Raises BinlogWriteError on write failure.
    """
    oldest = w.oldest()
    if oldest is w.active:
        return 0
    ids = oldest.ids
    i = oldest.cursor
    copied = 0
    limit = min(len(ids), i + 8 * budget)
    number = oldest.number
    while i < limit and copied < budget and oldest.live > 0:
        jid = ids[i]
        if w.index.segment_of(jid) == number:
            rec = lookup(jid)
            if rec is None:
                # The server no longer has it but the log thinks it is live: make the log
                # agree rather than resurrect it at the next start.
                log.warning("binlog: job %d unknown to the server; logging its delete", jid)
                w.delete(jid)
            else:
                w.put(rec, copy=True)
                w.migrated += 1
            copied += 1
        i += 1
    oldest.cursor = i
    return copied
