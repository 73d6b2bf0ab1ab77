"""The server's settings and their defaults, defined once for every way of starting it.

``cmdstalk-server``'s flags (``cli``) and ``EmbeddedServer``'s arguments (``embedded``)
both become a ``ServerConfig``, which ``assembly`` turns into a running server. Import-light
on purpose (a ``NamedTuple``, not a dataclass, whose module pulls in ``inspect``). The
default address lives in ``listen``, which ``cli`` uses before anything else is loaded.
"""

from __future__ import annotations

from cmdstalk_py.server.limits import DEFAULT_MAX_JOB_SIZE
from cmdstalk_py.server.listen import DEFAULT_HOST, DEFAULT_PORT

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from cmdstalk_py.server.standins import NamedTuple

__all__ = [
    "DEFAULT_FSYNC_MS",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_SEGMENT_SIZE",
    "GC_YOUNG_THRESHOLD",
    "MIN_SEGMENT_SIZE",
    "PREALLOCATE",
    "ServerConfig",
]
#: ``-f``: fsync at most this often (milliseconds).
DEFAULT_FSYNC_MS = 50
#: beanstalkd's default ``-s``: the size of each binlog file.
DEFAULT_SEGMENT_SIZE = 10485760
#: The cyclic GC's young-generation threshold in a process that is nothing but the server
#: (``cmdstalk-server``; raised to it, never lowered; CPython 3.13 made it the default). A
#: turn holds its framed events alive while the jobs it creates stay, so with 3.11's 700 a
#: turn of pipelined puts nearly always ended in a collection, and the more of those, the
#: more often a full one walks every stored job.
GC_YOUNG_THRESHOLD = 2000
#: The smallest segment the binlog accepts; smaller ``-s`` values are raised to it.
MIN_SEGMENT_SIZE = 1024
#: Zeros written ahead of the records when fsyncing (see ``binlog.segment``): an fsync
#: then has no new file size to commit.
PREALLOCATE = 1 << 20


class ServerConfig(NamedTuple):
    """What the server is started with: ``-z``, ``-b``, ``-f`` / ``-F``, ``-s``.

    ``fsync_ms`` None never fsyncs (``-F``). Without ``binlog_dir``, ``segment_size`` is
    only shown by ``stats``, as beanstalkd does. ``freeze_recovered``: keep the jobs
    recovered from the binlog out of every later garbage collection (``gc.freeze``, which
    freezes the whole process: only for a process that is nothing but the server).
    """

    max_job_size: int = DEFAULT_MAX_JOB_SIZE
    binlog_dir: str | None = None
    fsync_ms: int | None = DEFAULT_FSYNC_MS
    segment_size: int = DEFAULT_SEGMENT_SIZE
    freeze_recovered: bool = False
