"""Serving in the foreground: the event loop of ``cmdstalk-server`` and its signals."""

from __future__ import annotations

import gc
import signal
import socket
import sys
from typing import TYPE_CHECKING, Protocol

from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.journal import NullJournal
from cmdstalk_py.server.loop import Loop
from cmdstalk_py.server.net import Server

if TYPE_CHECKING:
    from cmdstalk_py.server.binlog.adapter import BinlogJournal
    from cmdstalk_py.server.durable import DurableConfig


class SignalFlags(Protocol):
    """Signals seen before the loop took over (see ``cli.EarlySignals``)."""

    stop: bool
    drain: bool


def serve(
    sock: socket.socket,
    max_job_size: int,
    early: SignalFlags,
    verbose: int = 0,
    durable: DurableConfig | None = None,
    binlog_size: int = 10485760,
) -> int:
    """Serve on the listening ``sock`` until SIGTERM/SIGINT; returns the exit status.

    With ``durable`` the binlog directory is locked and recovered first (clients that
    connect meanwhile wait in the listen backlog); a directory that cannot be used ends
    the process with status 1 and one line on stderr. Without it, ``binlog_size`` (``-s``)
    is only shown by ``stats``, as beanstalkd does.
    """
    loop = Loop()
    journal = None
    if durable is not None:
        # Only -b loads the binlog package.
        from cmdstalk_py.server.binlog import BinlogError
        from cmdstalk_py.server.durable import log_to_stderr, open_journal, restore

        log_to_stderr(verbose)
        try:
            journal = open_journal(durable)
        except BinlogError as exc:
            sys.stderr.write(f"cmdstalk-server: {exc}\n")
            sock.close()
            loop.close()
            return 1
    engine = Engine(loop.time(), max_job_size, journal or NullJournal(binlog_size))
    if journal is not None and restore(journal, engine, loop.time()):
        # The recovered jobs live long: keep them out of every future full collection
        # (with a million jobs one would stall the loop for a quarter of a second).
        gc.freeze()
    server = Server(engine, loop, journal)
    # From here on the loop owns the signals; its handlers only flip state.
    loop.add_signal_handler(signal.SIGUSR1, server.drain)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.add_signal_handler(signal.SIGINT, loop.stop)
    if early.drain:
        server.drain()
    closed = True
    try:
        if not early.stop:
            where = server.listen_socket(sock)
            if verbose:
                sys.stderr.write(f"cmdstalk-server: listening on {where}\n")
            loop.run_forever()
    finally:
        server.close()
        loop.run_once(block=False)  # callbacks still queued run against the closed server
        server.remove_unix_sockets()
        loop.close()
        if journal is not None:
            closed = _close_journal(journal)
    # 1 when the last changes could not be made durable.
    return 0 if closed else 1


def _close_journal(journal: BinlogJournal) -> bool:
    from cmdstalk_py.server.binlog import BinlogError

    try:
        journal.close()
    except BinlogError as exc:
        sys.stderr.write(f"cmdstalk-server: closing the binlog: {exc}\n")
        return False
    return True
