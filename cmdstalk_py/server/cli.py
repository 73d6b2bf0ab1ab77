"""The ``cmdstalk-server`` command line: a drop-in for ``beanstalkd``'s flags.

Start-up order, because clients' test suites give a freshly spawned server ~100 ms to
accept connections, on machines that may be busy: read where to listen with next to no
imports (:func:`quick_read`: the plain forms ``-l ADDR -p PORT ...``; anything else goes
through argparse first), take the binlog lock (``-b``), bind and listen, and only then
import argparse (``flags``: every flag checked), the engine and the loop. Clients that
connect meanwhile wait in the listen backlog.
"""

from __future__ import annotations

import sys

from cmdstalk_py.server.listen import DEFAULT_HOST, DEFAULT_PORT, bind_listener

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import _socket
    import argparse
    from collections.abc import Sequence
    from types import FrameType

    from cmdstalk_py.server.binlog.fsops import FileOps

#: Where to listen and which binlog directory to lock: (-l, -p, -b).
Where = tuple[str, int, str | None]

_VALUED = frozenset(("-l", "-p", "-z", "-b", "-f", "-s"))
_NUMERIC = frozenset(("-p", "-z", "-f", "-s"))


def quick_read(argv: Sequence[str]) -> Where | None:
    """``-l``, ``-p`` and ``-b`` from flags all in their plain forms (``-X VALUE``, ``-F``,
    ``-V``, numbers as decimal digits, a port up to 65535); None for anything else (``-h``,
    ``-v``, ``-p11300``, a mistake), which argparse reads first. What this accepts, argparse
    reads the same way (``main`` checks).
    """
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in _VALUED:
            value = argv[i + 1] if i + 1 < len(argv) else "-"
            if value.startswith("-") or (
                flag in _NUMERIC and not (value.isascii() and value.isdigit())
            ):
                return None
            found[flag] = value
            i += 2
        elif flag == "-F" or (len(flag) > 1 and flag.lstrip("-") == "V" * (len(flag) - 1)):
            i += 1
        else:
            return None
    port = int(found.get("-p", DEFAULT_PORT))
    if port > 65535:
        return None
    return found.get("-l", DEFAULT_HOST), port, found.get("-b") or None


def main(argv: Sequence[str] | None = None) -> None:
    """Parse beanstalkd-style flags and serve until SIGTERM/SIGINT."""
    words = sys.argv[1:] if argv is None else list(argv)
    args = None
    where = quick_read(words)
    if where is None:
        args = _parse(words)
        if args.version:
            from cmdstalk_py.server.flags import VERSION

            print(f"cmdstalk-server {VERSION}")
            return
        where = _where(args)
    listen, port, binlog_dir = where
    # The binlog directory's lock comes before the address: a second server refused by the
    # lock must never touch the first one's socket.
    file_ops = _lock_binlog(binlog_dir) if binlog_dir else None
    raw = _listen(listen, port)
    # Listening: from here on, clients wait in the backlog while the rest loads.
    early = EarlySignals()
    if args is None:
        args = _parse(words)
        if _where(args) != where:
            sys.stderr.write("cmdstalk-server: internal error: the flags read two ways\n")
            raise SystemExit(2)
    _serve(raw, args, early, file_ops)


def _parse(words: Sequence[str]) -> argparse.Namespace:
    from cmdstalk_py.server.flags import parse

    return parse(words)


def _where(args: argparse.Namespace) -> Where:
    return args.listen, args.port, args.binlog_dir or None


def _listen(listen: str, port: int) -> _socket.socket:
    try:
        return bind_listener(listen, port)
    except OSError as exc:
        where = listen if listen.startswith("unix:") else f"{listen}:{port}"
        sys.stderr.write(f"cmdstalk-server: cannot listen on {where}: {exc.strerror or exc}\n")
        raise SystemExit(1) from None


def _serve(
    raw: _socket.socket, args: argparse.Namespace, early: EarlySignals, file_ops: FileOps | None
) -> None:
    import gc

    from cmdstalk_py.server import limits
    from cmdstalk_py.server.config import GC_YOUNG_THRESHOLD, ServerConfig
    from cmdstalk_py.server.listen import as_socket
    from cmdstalk_py.server.run import serve

    max_job_size = args.max_job_size
    if max_job_size > limits.MAX_JOB_SIZE_CAP:
        cap = limits.MAX_JOB_SIZE_CAP
        sys.stderr.write(f"cmdstalk-server: maximum job size was set to {cap}\n")
        max_job_size = cap
    config = ServerConfig(
        max_job_size=max_job_size,
        binlog_dir=args.binlog_dir or None,
        fsync_ms=args.fsync_ms,
        segment_size=args.binlog_size,
        freeze_recovered=True,  # this process is nothing but the server
    )
    young, *older = gc.get_threshold()
    if young < GC_YOUNG_THRESHOLD:  # this process is nothing but the server
        gc.set_threshold(GC_YOUNG_THRESHOLD, *older)
    raise SystemExit(serve(as_socket(raw), config, early, args.verbose, file_ops))


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
        import signal

        self.stop = False
        self.drain = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_drain)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop = True

    def _on_drain(self, signum: int, frame: FrameType | None) -> None:
        self.drain = True
