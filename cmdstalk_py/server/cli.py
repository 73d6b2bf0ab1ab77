"""The ``cmdstalk-server`` command line: a drop-in for ``beanstalkd``'s flags.

Kept import-light on purpose: clients' test suites give a freshly spawned server only a
fraction of a second to accept connections.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from cmdstalk_py.server import limits as p
from cmdstalk_py.server.config import (
    DEFAULT_FSYNC_MS,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SEGMENT_SIZE,
    ServerConfig,
)
from cmdstalk_py.server.listen import open_listener

if TYPE_CHECKING:
    from cmdstalk_py.server.binlog.fsops import FileOps

VERSION = "1.12"

_DESCRIPTION = """\
A beanstalkd 1.12-compatible work queue server.

Unlike beanstalkd, which listens on all interfaces (0.0.0.0) by default, cmdstalk-server
listens on 127.0.0.1 unless -l says otherwise. SIGUSR1 enters drain mode (puts are answered
DRAINING); SIGTERM and SIGINT stop the server."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One clear line and exit status 2, like beanstalkd's usage errors.
        sys.stderr.write(f"cmdstalk-server: {message} (see -h)\n")
        raise SystemExit(2)


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"invalid port: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``-h`` prints its help)."""
    ap = _Parser(
        prog="cmdstalk-server",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    ap.add_argument(
        "-l",
        dest="listen",
        metavar="ADDR",
        default=DEFAULT_HOST,
        help="listen on address ADDR, or unix:PATH for a unix socket "
        f"(default {DEFAULT_HOST}; beanstalkd's default is all interfaces)",
    )
    ap.add_argument(
        "-p",
        dest="port",
        metavar="PORT",
        type=_port,
        default=DEFAULT_PORT,
        help=f"listen on TCP port PORT (default {DEFAULT_PORT})",
    )
    ap.add_argument(
        "-z",
        dest="max_job_size",
        metavar="BYTES",
        type=_positive_int,
        default=p.DEFAULT_MAX_JOB_SIZE,
        help=f"maximum job size in bytes (default {p.DEFAULT_MAX_JOB_SIZE}, "
        f"at most {p.MAX_JOB_SIZE_CAP})",
    )
    ap.add_argument(
        "-b",
        dest="binlog_dir",
        metavar="DIR",
        help="write-ahead log directory: jobs survive restarts and crashes",
    )
    # -f and -F share one destination: the last one given wins, as in beanstalkd.
    ap.add_argument(
        "-f",
        dest="fsync_ms",
        metavar="MS",
        type=_positive_int,
        default=DEFAULT_FSYNC_MS,
        help=f"fsync at most once every MS milliseconds (default "
        f"{DEFAULT_FSYNC_MS}); -f 0: fsync before every reply that changes state",
    )
    ap.add_argument("-F", dest="fsync_ms", action="store_const", const=None, help="never fsync")
    ap.add_argument(
        "-s",
        dest="binlog_size",
        metavar="BYTES",
        type=_positive_int,
        default=DEFAULT_SEGMENT_SIZE,
        help=f"size of each binlog file (default {DEFAULT_SEGMENT_SIZE})",
    )
    ap.add_argument("-V", dest="verbose", action="count", default=0, help="increase verbosity")
    ap.add_argument("-v", dest="version", action="store_true", help="show version and exit")
    ap.add_argument("-h", "--help", action="help", help="show this help and exit")
    return ap


class EarlySignals:
    """Signals that arrive before the event loop runs: remembered, acted on later."""

    def __init__(self) -> None:
        self.stop = False
        self.drain = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_drain)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop = True

    def _on_drain(self, signum: int, frame: FrameType | None) -> None:
        self.drain = True


def main(argv: Sequence[str] | None = None) -> None:
    """Parse beanstalkd-style flags and serve until SIGTERM/SIGINT."""
    early = EarlySignals()
    args = build_parser().parse_args(argv)
    if args.version:
        print(f"cmdstalk-server {VERSION}")
        return
    max_job_size = args.max_job_size
    if max_job_size > p.MAX_JOB_SIZE_CAP:
        sys.stderr.write(f"cmdstalk-server: maximum job size was set to {p.MAX_JOB_SIZE_CAP}\n")
        max_job_size = p.MAX_JOB_SIZE_CAP
    # The binlog directory's lock comes before the address: a second server refused by the
    # lock must never touch the first one's socket.
    file_ops = _lock_binlog(args.binlog_dir) if args.binlog_dir else None
    try:
        sock = open_listener(args.listen, args.port)
    except OSError as exc:
        where = args.listen if args.listen.startswith("unix:") else f"{args.listen}:{args.port}"
        sys.stderr.write(f"cmdstalk-server: cannot listen on {where}: {exc.strerror or exc}\n")
        raise SystemExit(1) from None
    # The heavier imports (the engine, the loop) happen after listen(): clients that connect
    # meanwhile wait in the backlog instead of getting "connection refused".
    from cmdstalk_py.server.run import serve

    config = ServerConfig(
        max_job_size=max_job_size,
        binlog_dir=args.binlog_dir or None,
        fsync_ms=args.fsync_ms,
        segment_size=args.binlog_size,
        freeze_recovered=True,  # this process is nothing but the server
    )
    raise SystemExit(serve(sock, config, early, args.verbose, file_ops))


def _lock_binlog(directory: str) -> FileOps:
    from cmdstalk_py.server.binlog import BinlogError
    from cmdstalk_py.server.durable import lock_directory

    try:
        return lock_directory(directory)
    except BinlogError as exc:
        sys.stderr.write(f"cmdstalk-server: {exc}\n")
        raise SystemExit(1) from None
