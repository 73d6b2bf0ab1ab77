"""A fast raw-socket reader for tests: take every ready job out of a tube, pipelined."""

from __future__ import annotations

import socket

from cmdstalk_py.client.pipeline import Client


def drain_tube(address: str, tube: str, window: int = 500) -> list[bytes]:
    """Reserve and delete every ready job of ``tube``; their bodies in reserve order.

    Sends ``window`` ``reserve-with-timeout 0`` at a time (their replies are read before
    more is sent), then the deletes for what came back, until the server says TIMED_OUT.
    """
    bodies: list[bytes] = []
    with Client.connect(address) as conn:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        conn.send(b"watch %s\r\nignore default\r\n" % tube.encode())
        conn.read_line()
        conn.read_line()  # NOT_IGNORED when tube is "default"; fine either way
        done = False
        while not done:
            conn.send(b"reserve-with-timeout 0\r\n" * window)
            ids = []
            for _ in range(window):
                words = conn.read_line().split(b" ")
                if words[0] == b"TIMED_OUT":
                    done = True
                    continue
                assert words[0] == b"RESERVED", words
                ids.append(int(words[1]))
                bodies.append(conn.read_body(int(words[2])))
            if ids:
                conn.send(b"".join(b"delete %d\r\n" % i for i in ids))
                for _ in ids:
                    assert conn.read_line() == b"DELETED"
    return bodies
