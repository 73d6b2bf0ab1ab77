"""One server assembly: engine, journal or binlog, event loop and ``net.Server``.

``cmdstalk-server`` (``run``) and ``EmbeddedServer`` (``embedded``) both build the server
here from a ``ServerConfig`` and tear it down here, in one order: connections and
listeners first, then the callbacks still queued, then the loop, then the binlog (its last
fsync). What differs between them (signals and the listening socket for the command line,
a background thread for the embedded server) stays with them.
"""

from __future__ import annotations

import gc

from cmdstalk_py.loop.core import Loop
from cmdstalk_py.server.config import ServerConfig
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.journal import Journal, NullJournal
from cmdstalk_py.server.net import Server

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from cmdstalk_py.server.binlog.adapter import BinlogJournal
    from cmdstalk_py.server.binlog.fsops import FileOps


class Assembly:
    """A server ready to listen: ``loop``, ``engine``, ``server`` and its ``binlog``."""

    def __init__(
        self, loop: Loop, engine: Engine, server: Server, binlog: BinlogJournal | None
    ) -> None:
        self.loop = loop
        self.engine = engine
        self.server = server
        self.binlog = binlog

    @classmethod
    def open(
        cls,
        config: ServerConfig,
        journal: Journal | None = None,
        file_ops: FileOps | None = None,
    ) -> Assembly:
        """Build the server; with ``config.binlog_dir`` lock and recover that directory first.

        ``journal``: an in-memory durability hook instead of a binlog; ``file_ops``: the
        binlog's file operations (fault injection). Raises ``BinlogError`` when the
        directory cannot be used; nothing is left open then.
        """
        if journal is not None and config.binlog_dir is not None:
            raise ValueError("journal and binlog_dir exclude each other")
        loop = Loop()
        binlog: BinlogJournal | None = None
        try:
            if config.binlog_dir is not None:
                # Only a binlog loads the binlog package.
                from cmdstalk_py.server.binlog.recovery import collector_paused
                from cmdstalk_py.server.durable import open_journal

                with collector_paused():  # reading the log and rebuilding its jobs
                    binlog = open_journal(config.binlog_dir, config, file_ops)
                    engine = Engine(loop.time(), config.max_job_size, binlog)
                    _restore(binlog, engine, loop.time(), config.freeze_recovered)
            else:
                hook = journal or NullJournal(config.segment_size)
                engine = Engine(loop.time(), config.max_job_size, hook)
            return cls(loop, engine, Server(engine, loop, binlog), binlog)
        except BaseException:
            loop.close()
            if binlog is not None:
                import contextlib  # only on this error path

                # The error that stopped the start is the one to report.
                with contextlib.suppress(Exception):
                    binlog.close()
            raise

    def close(self) -> None:
        """Close every connection and listener, the loop, then the binlog. Idempotent.

        Raises ``BinlogError`` when the binlog's last changes could not be made durable
        (everything else is closed by then).
        """
        if self.loop.closed:
            return
        try:
            self.server.close()
            self.loop.run_once(block=False)  # callbacks still queued run against the closed server
            self.server.remove_unix_sockets()
        finally:
            self.loop.close()
            if self.binlog is not None:
                binlog, self.binlog = self.binlog, None
                binlog.close()


def _restore(binlog: BinlogJournal, engine: Engine, now: float, freeze: bool) -> None:
    from cmdstalk_py.server.durable import restore

    if restore(binlog, engine, now) and freeze:
        # The recovered jobs live long: keep them out of every future full collection,
        # which with many jobs would stall the loop (figures: benchmarks/README.md).
        gc.freeze()
