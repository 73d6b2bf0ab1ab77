"""Raw HTTP/1.1 to a dashboard: the bytes a test chooses, the answer as it comes."""

from __future__ import annotations

import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes


def request(method: str, path: str, host: str | None, extra: str = "") -> bytes:
    """A request's bytes; ``host`` None sends no Host header."""
    lines = [f"{method} {path} HTTP/1.1"] + ([f"Host: {host}"] if host is not None else [])
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode("latin-1")


def read_answer(sock: socket.socket, head_only: bool = False) -> Answer | None:
    """The next answer on ``sock``; None when it was closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = 0 if head_only else int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Answer(int(lines[0].split(" ")[1]), headers, body)


def exchange(address: tuple[str, int], data: bytes, head_only: bool = False) -> Answer | None:
    """Send ``data`` on a new connection and read one answer."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(data)
        return read_answer(sock, head_only)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed ``sock`` (it reads end-of-file, or a reset)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
