"""Listening sockets for TCP and unix addresses (import-light: used before the server loads)."""

from __future__ import annotations

import os
import socket

BACKLOG = 1024


def open_listener(listen: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``listen:port``, or on ``unix:PATH``.

    A stale unix socket file is replaced. Only the first address ``listen`` resolves to is
    bound (``localhost`` may mean ::1 or 127.0.0.1: give an address to be sure).
    """
    if listen.startswith("unix:"):
        path = listen[len("unix:") :]
        if os.path.exists(path) and not os.path.isdir(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
        except BaseException:
            sock.close()
            raise
    else:
        info = socket.getaddrinfo(listen, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, addr = info[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except BaseException:
            sock.close()
            raise
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock
