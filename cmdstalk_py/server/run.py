"""Serving in the foreground: the event loop of ``cmdstalk-server`` and its signals."""

from __future__ import annotations

import sys

from cmdstalk_py.server.assembly import Assembly
from cmdstalk_py.server.config import ServerConfig

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import signal
    from _socket import socket
    from typing import Protocol

    from cmdstalk_py.server.binlog.fsops import FileOps
else:
    import _signal as signal  # without signal.py's enums (start-up time)

    Protocol = object  # SignalFlags is for mypy; at run time, a plain class


class SignalFlags(Protocol):
    """Signals seen before the loop took over (``cli.EarlySignals``)."""

    stop: bool
    drain: bool


def serve(
    sock: socket,
    config: ServerConfig,
    early: SignalFlags,
    verbose: int = 0,
    file_ops: FileOps | None = None,
) -> int:
    """Serve on the listening ``sock`` until SIGTERM/SIGINT; returns the exit status.

    With ``config.binlog_dir`` the directory is recovered first (clients that connect
    meanwhile wait in the listen backlog; ``file_ops``: the binlog's, see
    ``durable.lock_directory``); a directory that cannot be used ends the process with
    status 1 and one line on stderr.
    """
    asm = _open(sock, config, verbose, file_ops)
    if asm is None:
        return 1
    loop, server = asm.loop, asm.server
    # From here on the loop owns the signals; its handlers only flip state.
    loop.add_signal_handler(signal.SIGUSR1, server.drain)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.add_signal_handler(signal.SIGINT, loop.stop)
    if early.drain:
        server.drain()
    try:
        if not early.stop:
            where = server.listen_socket(sock)
            if verbose:
                sys.stderr.write(f"cmdstalk-server: listening on {where}\n")
            loop.run_forever()
    finally:
        closed = _close(asm)
    # 1 when the last changes could not be made durable.
    return 0 if closed else 1


def _open(
    sock: socket, config: ServerConfig, verbose: int, file_ops: FileOps | None
) -> Assembly | None:
    if config.binlog_dir is None:
        return Assembly.open(config)
    # Only -b loads the binlog package.
    from cmdstalk_py.server.binlog import BinlogError
    from cmdstalk_py.server.durable import log_to_stderr

    log_to_stderr(verbose)
    try:
        return Assembly.open(config, file_ops=file_ops)
    except BinlogError as exc:
        sys.stderr.write(f"cmdstalk-server: {exc}\n")
        sock.close()
        return None


def _close(asm: Assembly) -> bool:
    if asm.binlog is None:
        asm.close()
        return True
    from cmdstalk_py.server.binlog import BinlogError

    try:
        asm.close()
    except BinlogError as exc:
        sys.stderr.write(f"cmdstalk-server: closing the binlog: {exc}\n")
        return False
    return True
