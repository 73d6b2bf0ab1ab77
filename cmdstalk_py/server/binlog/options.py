"""Binlog configuration (the server's ``-f``, ``-F``, ``-s``) and its statistics."""

from __future__ import annotations

from dataclasses import dataclass

from cmdstalk_py.server.config import DEFAULT_FSYNC_MS, DEFAULT_SEGMENT_SIZE, MIN_SEGMENT_SIZE


@dataclass(frozen=True, slots=True)
class BinlogOptions:
    """How the binlog writes.

    ``fsync_ms``: None never fsyncs (``-F``), 0 fsyncs before every reply (``-f 0``), N
    at most every N milliseconds (``-f N``, default ``DEFAULT_FSYNC_MS``). ``segment_size``: ``-s``.
    ``compact_ratio``: compact when the files hold more than this many times the live
    jobs' bytes. ``compact_budget``: jobs copied per ``tick`` at most.
    ``save_torn_tails``: keep bytes cut from a torn segment in ``binlog.N.torn-OFFSET``.
    ``preallocate``: keep this many bytes of zeros written ahead of the records (0: off;
    see ``segment``): each fsync then only flushes data, not a new file size.
    """

    fsync_ms: int | None = DEFAULT_FSYNC_MS
    segment_size: int = DEFAULT_SEGMENT_SIZE
    compact_ratio: float = 2.0
    compact_budget: int = 256
    save_torn_tails: bool = True
    preallocate: int = 0

    def __post_init__(self) -> None:
        if self.fsync_ms is not None and self.fsync_ms < 0:
            raise ValueError("fsync_ms must be >= 0 or None")
        if self.segment_size < MIN_SEGMENT_SIZE:
            raise ValueError(f"segment_size must be at least {MIN_SEGMENT_SIZE} bytes")
        if self.compact_ratio <= 1.0:
            raise ValueError("compact_ratio must be > 1")
        if self.compact_budget < 1:
            raise ValueError("compact_budget must be >= 1")
        if self.preallocate < 0:
            raise ValueError("preallocate must be >= 0")


@dataclass(frozen=True, slots=True)
class BinlogStats:
    """Counters for ``stats`` (beanstalkd's binlog-* fields) and for monitoring."""

    oldest_index: int
    current_index: int
    records_written: int
    records_migrated: int
    max_size: int
    segments: int
    total_bytes: int
    live_jobs: int
    live_bytes: int
    syncs: int
