"""Reply framing: bytes off a beanstalkd connection in, whole replies out (sans-IO).

A reply is one CRLF-terminated line, followed by a data block when its first word says so
(``RESERVED id size``, ``FOUND id size``, ``OK size``). ``ReplyFramer.feed`` takes what
the socket gave and returns the replies it completed; no socket here, so the framing is
tested with bytes alone. Every read is bounded: a line longer than ``MAX_LINE`` without
its CRLF, a block larger than ``max_body``, a line ended by a bare LF, or a block whose
CRLF is missing raises ``UnexpectedReply`` (the connection is out of step: drop it).
"""

from __future__ import annotations

from dataclasses import dataclass

from cmdstalk_py.client.errors import UnexpectedReply

#: The longest reply line (beanstalkd's longest is ~70 bytes; stats come as a block).
MAX_LINE = 1024
#: The largest data block accepted (a job body; beanstalkd's -z allows up to 1 GiB).
MAX_BODY = 1 << 30

# The reply words that carry a data block, and which of their fields is its size.
_BODY_SIZE_FIELD = {b"RESERVED": 2, b"FOUND": 2, b"OK": 1}


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply: its line without CRLF, and its data block (without CRLF) if it has one."""

    line: bytes
    body: bytes | None = None


class ReplyFramer:
    """Splits a connection's incoming bytes into ``Reply`` values, in order."""

    __slots__ = ("_buf", "_line", "_max_body", "_need")

    def __init__(self, max_body: int = MAX_BODY) -> None:
        self._buf = bytearray()
        self._max_body = max_body
        self._line: bytes | None = None  # a line whose data block is still coming
        self._need = 0  # bytes of that block, its CRLF included

    def feed(self, data: bytes | memoryview) -> list[Reply]:
        """The replies ``data`` completes (maybe none); ``UnexpectedReply`` if out of step."""
        buf = self._buf
        buf += data
        replies: list[Reply] = []
        while True:
            if self._line is not None:
                if len(buf) < self._need:
                    return replies
                block = bytes(buf[: self._need])
                del buf[: self._need]
                if block[-2:] != b"\r\n":
                    raise UnexpectedReply("data block without CRLF")
                replies.append(Reply(self._line, block[:-2]))
                self._line = None
                continue
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > MAX_LINE:
                    raise UnexpectedReply(f"reply line over {MAX_LINE} bytes")
                return replies
            if end == 0 or buf[end - 1] != 0x0D:
                raise UnexpectedReply(f"reply line without CRLF: {bytes(buf[: end + 1][:80])!r}")
            line = bytes(buf[: end - 1])
            del buf[: end + 1]
            size = self._block_size(line)
            if size is None:
                replies.append(Reply(line))
            else:
                self._line, self._need = line, size + 2

    def _block_size(self, line: bytes) -> int | None:
        words = line.split(b" ")
        field = _BODY_SIZE_FIELD.get(words[0])
        if field is None:
            return None
        if len(words) != field + 1 or not words[field].isdigit():
            raise UnexpectedReply(f"unexpected reply {line[:80]!r}")
        size = int(words[field])
        if size > self._max_body:
            raise UnexpectedReply(f"data block of {size} bytes (over {self._max_body})")
        return size
