"""Listening sockets for TCP and unix addresses, and the default address.

``cmdstalk-server`` binds before it imports anything else (see ``cli``), so this module
imports next to nothing: ``_socket`` rather than ``socket``, whose import (``enum``,
``selectors``) would come before the first connection could be accepted. The server
serves ``_socket`` sockets throughout (a ``socket.socket`` given to it is one too).
"""

from __future__ import annotations

import _socket
import errno
import os
import stat

#: Unlike beanstalkd (all interfaces), the bundled server listens on loopback by default.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11300
BACKLOG = 1024


def bind_listener(listen: str, port: int) -> _socket.socket:
    """A non-blocking socket listening on ``listen:port``, or on ``unix:PATH``.

    A stale unix socket file (nothing listens on it) is replaced; anything else at PATH is
    left alone and refused with an OSError: a regular file, a directory, a link, or the
    socket of a server that is running. Only the first address ``listen`` resolves to is
    bound (``localhost`` may mean ::1 or 127.0.0.1: give an address to be sure).
    """
    if listen.startswith("unix:"):
        path = listen[len("unix:") :]
        _remove_stale_socket(path)
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        where: str | tuple[object, ...] = path
    else:
        # An ASCII name as bytes: a str would be IDNA-encoded, which loads a codec.
        host = listen.encode() if listen.isascii() else listen
        info = _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM, 0, _socket.AI_PASSIVE)
        family, kind, proto, _name, where = info[0]
        sock = _socket.socket(family, kind, proto)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    try:
        sock.bind(where)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
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
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
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
