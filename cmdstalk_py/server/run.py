"""Serving in the foreground: the event loop of ``cmdstalk-server`` and its signals."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from typing import Protocol

from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.net import Server


class SignalFlags(Protocol):
    """Signals seen before the loop took over (see ``cli.EarlySignals``)."""

    stop: bool
    drain: bool


def serve(sock: socket.socket, max_job_size: int, early: SignalFlags, verbose: int = 0) -> int:
    """Serve on the listening ``sock`` until SIGTERM/SIGINT; returns the exit status."""
    loop = asyncio.new_event_loop()
    server = Server(Engine(loop.time(), max_job_size), loop)
    # From here on the loop owns the signals; its handlers only flip state.
    loop.add_signal_handler(signal.SIGUSR1, server.drain)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.add_signal_handler(signal.SIGINT, loop.stop)
    if early.drain:
        server.drain()
    try:
        if early.stop:
            return 0
        where = loop.run_until_complete(server.listen_socket(sock))
        if verbose:
            sys.stderr.write(f"cmdstalk-server: listening on {where}\n")
        loop.run_forever()
    finally:
        server.close()
        loop.run_until_complete(asyncio.sleep(0))
        server.remove_unix_sockets()
        loop.close()
    return 0
