"""When to compact, as pure functions of the log's accounting.

How compaction works (carried out by ``Binlog``, a bounded step per ``tick``):

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


def should_compact(total_bytes: int, live_bytes: int, sealed_segments: int, ratio: float) -> bool:
    """True when copying live jobs out of the oldest segment is worth it.

    ``sealed_segments`` counts segments other than the one being written: the one being
    written is never compacted (it would copy jobs into itself).
    """
    return sealed_segments > 0 and total_bytes > ratio * live_bytes


def removable(oldest_live: int, oldest_is_current: bool) -> bool:
    """True when the oldest segment holds no live job and can be unlinked."""
    return oldest_live == 0 and not oldest_is_current
