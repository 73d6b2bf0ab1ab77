"""The dashboard's HTTP/1.1 bytes, sans IO: a request head parsed into a ``Request``, a
``Response`` rendered into bytes. No socket here: ``listener`` reads and writes them.

Only what the dashboard needs: origin-form targets, ``Content-Length`` bodies of at most
``MAX_BODY`` bytes (no chunked uploads), keep-alive. Anything else is a ``BadRequest``
carrying the status to answer; its message is safe to send back and to log (one line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD = 8192  # request line and headers: a browser's are ~1 KiB
MAX_BODY = 4096  # an action's JSON body is a few dozen bytes
MAX_HEADERS = 64

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"/[\x21-\x7e]*")
_SINGLE = ("host", "content-length", "transfer-encoding")  # sent twice: refused


class BadRequest(Exception):
    """A request the dashboard will not serve: answer ``status`` with this message, then
    close the connection (what follows the bad part cannot be trusted to be a request)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    """A request's head (and, once read, its body)."""

    method: str
    target: str
    version: str
    headers: dict[str, str]  # names lowercased
    body: bytes = b""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"

    def content_length(self) -> int:
        """The body's length as declared; ``BadRequest`` when it cannot be served."""
        if "transfer-encoding" in self.headers:
            raise BadRequest(411, "only bodies with a Content-Length are accepted")
        value = self.headers.get("content-length", "0")
        if not value.isascii() or not value.isdigit():
            raise BadRequest(400, "Content-Length is not a number")
        if len(value) > 10 or int(value) > MAX_BODY:
            raise BadRequest(413, f"a body is at most {MAX_BODY} bytes")
        return int(value)


@dataclass(frozen=True)
class Response:
    """What to answer: ``close`` ends the connection after it."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False


def parse_head(head: bytes) -> Request:
    """The request line and headers of ``head`` (up to and including the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise BadRequest(400, "empty request")
    method, target, version = _request_line(lines[0])
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"at most {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, value = _header(line)
        if name in headers and name in _SINGLE:
            raise BadRequest(400, f"{name} given twice")
        headers[name] = value if name not in headers else headers[name] + ", " + value
    return Request(method, target, version, headers)


def _request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(505, "HTTP/1.1 or HTTP/1.0 only")
    if not _TARGET.fullmatch(target):
        raise BadRequest(400, "the target must be a path")
    return method, target, version


def _header(line: str) -> tuple[str, str]:
    name, colon, value = line.partition(":")
    if not colon or not _TOKEN.fullmatch(name):  # also a folded line (leading space)
        raise BadRequest(400, "malformed header line")
    return name.lower(), value.strip(" \t")


def render(response: Response, head_only: bool = False) -> bytes:
    """``response`` as bytes, with ``Content-Length`` (and ``Connection: close`` if it
    closes); ``head_only`` (a HEAD request) leaves the body out."""
    reason = _reason(response.status)
    lines = [f"HTTP/1.1 {response.status} {reason}",
             f"Content-Type: {response.content_type}",
             f"Content-Length: {len(response.body)}"]  # fmt: skip
    lines += [f"{name}: {value}" for name, value in response.headers.items()]
    if response.close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
