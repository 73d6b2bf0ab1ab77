"""Reading the config file: one regular file, bounded, without ever blocking.

SIGHUP re-reads the file from the supervisor's main loop, the loop that also acts on
SIGTERM; whatever the path has become by then must not stall or swell it. So the path is
resolved once (a symlink swapped mid-reload cannot mix two files: the bytes and the
directory that relative ``cwd`` keys start from are the one file's), opened without
blocking (a FIFO would wait for a writer forever), refused unless the opened descriptor is
a regular file (``/dev/zero`` never ends), and read to at most ``MAX_BYTES``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

#: The largest config file read: far above any real one (a pool is a few hundred bytes),
#: low enough that reading and parsing it takes a fraction of a second.
MAX_BYTES = 1024 * 1024

# O_NONBLOCK: a FIFO opens at once instead of waiting for a writer (then refused);
# O_NOCTTY: a terminal device never becomes our controlling terminal by being opened;
# O_NOFOLLOW: the resolved path's last component turned into a link since is refused.
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileReadError(ValueError):
    """The file cannot be used as a config file; the message is one line, without the path."""


@dataclass(frozen=True, slots=True)
class FileText:
    """What was read, and the real path of the one file it came from."""

    data: bytes
    path: Path


def read_regular(path: Path | str, limit: int = MAX_BYTES) -> FileText:
    """The bytes of the regular file at ``path`` (links resolved once), at most ``limit``;
    ``FileReadError`` for anything else: missing, unreadable, not a regular file, larger."""
    real = Path(os.path.realpath(path))
    _refuse_kind(_stat(real))  # before opening: opening some devices has effects of its own
    try:
        fd = os.open(real, _FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FileReadError("replaced by a link while being read; try again") from None
        raise FileReadError(_reason(e)) from None
    try:
        _refuse_kind(os.fstat(fd))  # what was opened, whatever the path became meanwhile
        return FileText(_read_at_most(fd, limit), real)
    finally:
        os.close(fd)


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as e:
        raise FileReadError(_reason(e)) from None


def _refuse_kind(st: os.stat_result) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
    raise FileReadError(f"{kind}, not a regular file: a config file must be a regular file")


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= limit:  # one byte past the limit tells a larger file from one at it
        try:
            chunk = os.read(fd, limit + 1 - size)
        except OSError as e:
            raise FileReadError(_reason(e)) from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise FileReadError(f"larger than {limit} bytes: a config file is at most that")


def _reason(error: OSError) -> str:
    return error.strerror or str(error)
