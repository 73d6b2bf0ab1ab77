"""Opening the binlog behind a server (``-b``): options from the settings, recovery, logging.

Imported only when a binlog is asked for, so the in-memory start-up path never loads the
binlog package (start-up time, see ``cli``).
"""

from __future__ import annotations

import logging
import os
import sys
import time

from cmdstalk_py.server.binlog import Binlog, BinlogError, BinlogOptions, FileOps
from cmdstalk_py.server.binlog.adapter import BinlogJournal
from cmdstalk_py.server.binlog.errors import describe_oserror
from cmdstalk_py.server.binlog.fsops import RealFileOps
from cmdstalk_py.server.binlog.lock import DirLock
from cmdstalk_py.server.config import MIN_SEGMENT_SIZE, PREALLOCATE, ServerConfig
from cmdstalk_py.server.engine import Engine

LOGGER = "cmdstalk_py.server.binlog"


def binlog_options(config: ServerConfig) -> BinlogOptions:
    """The binlog's options for the server's settings."""
    return BinlogOptions(
        fsync_ms=config.fsync_ms,
        segment_size=max(MIN_SEGMENT_SIZE, config.segment_size),
        preallocate=0 if config.fsync_ms is None else PREALLOCATE,
    )


def open_journal(directory: str, config: ServerConfig, ops: FileOps | None = None) -> BinlogJournal:
    """Lock and recover ``directory`` (raises ``BinlogError`` with a clear message).

    The journal's clock is ``time.monotonic``, the clock of the server loop and of the
    network layer, so the engine's times and the journal's agree.
    """
    binlog = Binlog(directory, binlog_options(config), ops=ops)
    return BinlogJournal(binlog, clock=time.monotonic)


class LockedDirOps(RealFileOps):
    """The real file operations for a directory whose lock this process already holds.

    ``cmdstalk-server -b DIR`` takes ``DIR/lock`` before it binds its address, so that a
    second server refused by the lock never touches the first one's socket; the binlog
    that opens DIR afterwards then finds its lock taken by this very process (a second
    ``flock`` on another descriptor would refuse it).
    """

    def __init__(self, lock: DirLock) -> None:
        #: Held until the process exits (the kernel drops it then, even on a crash).
        self.held = lock

    def lock(self, fd: int) -> None:
        """Nothing to take: this process holds the directory's lock already."""


def lock_directory(directory: str) -> LockedDirOps:
    """Lock ``directory`` (created if missing) for this process's lifetime.

    Raises ``BinlogLockedError`` naming the holder, or ``BinlogError``. Returns the file
    operations to open the directory's binlog with later.
    """
    ops = RealFileOps()
    try:
        ops.makedirs(directory)
    except OSError as exc:
        raise BinlogError(describe_oserror("cannot create", directory, exc)) from exc
    return LockedDirOps(DirLock.acquire(ops, os.path.abspath(directory)))


def restore(journal: BinlogJournal, engine: Engine, now: float) -> int:
    """Rebuild the recovered jobs in ``engine`` (reserved ones come back ready).

    Delays that ran out while the server was down end at once, before any client can ask.
    """
    count = journal.restore(engine, now)
    engine.tick(now)
    return count


def log_to_stderr(verbose: int) -> None:
    """Send the binlog's log (recovery summary and problems, I/O errors) to stderr.

    ``cmdstalk-server`` has no other logging; an embedding application configures its own.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("cmdstalk-server: %(message)s"))
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    logger.propagate = False
