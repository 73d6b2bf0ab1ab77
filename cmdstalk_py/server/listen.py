"""Listening sockets for TCP and unix addresses (import-light: used before the server loads)."""

from __future__ import annotations

import errno
import os
import socket
import stat

BACKLOG = 1024


def open_listener(listen: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``listen:port``, or on ``unix:PATH``.

    A stale unix socket file (nothing listens on it) is replaced; anything else at PATH is
    left alone and refused with an OSError: a regular file, a directory, a link, or the
    socket of a server that is running. Only the first address ``listen`` resolves to is
    bound (``localhost`` may mean ::1 or 127.0.0.1: give an address to be sure).
    """
    if listen.startswith("unix:"):
        path = listen[len("unix:") :]
        _remove_stale_socket(path)
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


def _remove_stale_socket(path: str) -> None:
    """Delete the socket file at ``path`` if no server listens on it; refuse anything else.

    beanstalkd refuses a file that is not a socket too; unlike it, a socket that a server
    still listens on is refused rather than taken over (its server would be unreachable).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, "a file that is not a socket is in the way", path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # left behind by a server that is gone
        return
    except BlockingIOError:
        pass  # its backlog is full: a server is there
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, "a server is listening on this socket", path)
