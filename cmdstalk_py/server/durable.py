"""Starting a server with a binlog (``-b``): options from the flags, recovery, logging.

Imported only when a binlog is asked for, so the in-memory start-up path never loads the
binlog package (start-up time, see ``cli``).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from cmdstalk_py.server.binlog import Binlog, BinlogOptions, FileOps
from cmdstalk_py.server.binlog.adapter import BinlogJournal
from cmdstalk_py.server.binlog.options import DEFAULT_SEGMENT_SIZE
from cmdstalk_py.server.engine import Engine

#: The smallest segment the binlog accepts; smaller ``-s`` values are raised to it.
MIN_SEGMENT_SIZE = 1024
#: Zeros written ahead of the records when fsyncing (see ``binlog.segment``): an fsync
#: then has no new file size to commit, which halves its cost on ext4.
PREALLOCATE = 1 << 20

LOGGER = "cmdstalk_py.server.binlog"


@dataclass(frozen=True)
class DurableConfig:
    """The binlog flags: ``-b DIR``, ``-f MS`` (None: ``-F``, never fsync), ``-s BYTES``."""

    directory: str
    fsync_ms: int | None = 50
    segment_size: int = DEFAULT_SEGMENT_SIZE

    def options(self) -> BinlogOptions:
        """The binlog's options for these flags."""
        return BinlogOptions(
            fsync_ms=self.fsync_ms,
            segment_size=max(MIN_SEGMENT_SIZE, self.segment_size),
            preallocate=0 if self.fsync_ms is None else PREALLOCATE,
        )


def open_journal(config: DurableConfig, ops: FileOps | None = None) -> BinlogJournal:
    """Lock and recover ``config.directory`` (raises ``BinlogError`` with a clear message).

    The journal's clock is ``time.monotonic``, the clock of the server loop and of the
    network layer, so the engine's times and the journal's agree.
    """
    binlog = Binlog(config.directory, config.options(), ops=ops)
    return BinlogJournal(binlog, clock=time.monotonic)


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
