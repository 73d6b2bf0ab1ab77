"""Durable storage for the bundled server: a write-ahead binlog with crash recovery.

Modules: ``record`` (the persisted job), ``codec`` (every record's bytes, written and
read: frames and payloads, one record or a segment's worth), ``header`` (the segment
file header and format version), ``fsops`` (injectable file operations), ``lock`` (one
server per directory), ``segment`` (segment files and ``LiveIndex``, the one place live
jobs are counted per segment), ``replay`` (applying records), ``recovery`` (replay
order, damage and repair), ``compaction`` (when to reclaim space, why it is crash-safe,
and the bounded maintenance step that does it), ``writer`` (appending and segment
rotation), ``log`` (``Binlog``: the API, fsync policy and failed-fsync re-logging,
driven by the server's event loop), ``adapter`` (``BinlogJournal``: the engine's
``Journal`` hook; imported on its own so this package does not depend on the engine).

Typical use by the server::

    binlog = Binlog.open(directory, BinlogOptions(fsync_ms=50))
    for rec in binlog.recovery.jobs.values():
        ...  # rebuild the job in the engine
    binlog.lookup = engine_lookup  # current JobRecord of an id, or None
    binlog.put(rec); binlog.update(rec); binlog.delete(job_id)
    binlog.tick(now)  # each event-loop iteration, before sending replies
    timeout = binlog.next_deadline()
"""

from cmdstalk_py.server.binlog.errors import (
    BinlogClosedError,
    BinlogError,
    BinlogFormatError,
    BinlogLockedError,
    BinlogSyncError,
    BinlogWriteError,
    Problem,
)
from cmdstalk_py.server.binlog.fsops import FileOps, RealFileOps
from cmdstalk_py.server.binlog.log import Binlog
from cmdstalk_py.server.binlog.options import BinlogOptions, BinlogStats
from cmdstalk_py.server.binlog.record import JobRecord, Lookup, StoredState
from cmdstalk_py.server.binlog.recovery import RecoveryResult

__all__ = [
    "Binlog",
    "BinlogClosedError",
    "BinlogError",
    "BinlogFormatError",
    "BinlogLockedError",
    "BinlogOptions",
    "BinlogStats",
    "BinlogSyncError",
    "BinlogWriteError",
    "FileOps",
    "JobRecord",
    "Lookup",
    "Problem",
    "RealFileOps",
    "RecoveryResult",
    "StoredState",
]
