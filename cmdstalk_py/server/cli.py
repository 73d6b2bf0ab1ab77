"""The ``cmdstalk-server`` command line: a drop-in for ``beanstalkd``'s flags.

Start-up order, because clients' test suites spawn a server per test and give it a few
tens of milliseconds, on machines that may be busy: read the flags with next to no imports
(``flags.read``: the plain forms; anything else goes through argparse, built from the same
table), take the binlog lock (``-b``), bind and listen, then import the engine and the
loop (the binlog package only with ``-b``) and answer. Clients that connect meanwhile
wait in the listen backlog.
"""

from __future__ import annotations

import sys

from cmdstalk_py.server import flags as f
from cmdstalk_py.server.listen import bind_listener

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import _socket
    from collections.abc import Sequence
    from types import FrameType

    from cmdstalk_py.server.binlog.fsops import FileOps


def main(argv: Sequence[str] | None = None) -> None:
    """Parse beanstalkd-style flags and serve until SIGTERM/SIGINT."""
    words = sys.argv[1:] if argv is None else list(argv)
    flags = f.read(words) or f.parse(words)
    if flags.version:
        print(f"cmdstalk-server {f.VERSION}")
        return
    # The binlog directory's lock comes before the address: a second server refused by the
    # lock must never touch the first one's socket.
    file_ops = _lock_binlog(flags.binlog_dir) if flags.binlog_dir else None
    raw = _listen(flags.listen, flags.port)
    # Listening: from here on, clients wait in the backlog while the rest loads.
    early = EarlySignals()
    _serve(raw, flags, early, file_ops)


def _listen(listen: str, port: int) -> _socket.socket:
    try:
        return bind_listener(listen, port)
    except OSError as exc:
        where = listen if listen.startswith("unix:") else f"{listen}:{port}"
        sys.stderr.write(f"cmdstalk-server: cannot listen on {where}: {exc.strerror or exc}\n")
        raise SystemExit(1) from None


def _serve(
    raw: _socket.socket, flags: f.Flags, early: EarlySignals, file_ops: FileOps | None
) -> None:
    import gc

    from cmdstalk_py.server import limits
    from cmdstalk_py.server.config import GC_YOUNG_THRESHOLD, ServerConfig
    from cmdstalk_py.server.run import serve

    max_job_size = flags.max_job_size
    if max_job_size > limits.MAX_JOB_SIZE_CAP:
        cap = limits.MAX_JOB_SIZE_CAP
        sys.stderr.write(f"cmdstalk-server: maximum job size was set to {cap}\n")
        max_job_size = cap
    config = ServerConfig(
        max_job_size=max_job_size,
        binlog_dir=flags.binlog_dir or None,
        fsync_ms=flags.fsync_ms,
        segment_size=flags.binlog_size,
        freeze_recovered=True,  # this process is nothing but the server
    )
    young, *older = gc.get_threshold()
    if young < GC_YOUNG_THRESHOLD:  # this process is nothing but the server
        gc.set_threshold(GC_YOUNG_THRESHOLD, *older)
    raise SystemExit(serve(raw, config, early, flags.verbose, file_ops))


def _lock_binlog(directory: str) -> FileOps:
    from cmdstalk_py.server.binlog import BinlogError
    from cmdstalk_py.server.durable import lock_directory

    try:
        return lock_directory(directory)
    except BinlogError as exc:
        sys.stderr.write(f"cmdstalk-server: {exc}\n")
        raise SystemExit(1) from None


class EarlySignals:
    """Signals that arrive before the event loop runs: remembered, acted on later."""

    def __init__(self) -> None:
        if TYPE_CHECKING:
            import signal
        else:
            import _signal as signal  # without signal.py's enums (start-up time)

        self.stop = False
        self.drain = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_drain)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop = True

    def _on_drain(self, signum: int, frame: FrameType | None) -> None:
        self.drain = True
