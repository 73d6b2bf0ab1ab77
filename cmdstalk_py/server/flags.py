"""``cmdstalk-server``'s flags (beanstalkd's), parsed by argparse: ``-h``, every check, errors.

Loaded once the server listens (see ``cli``): argparse and the defaults it shows are not
worth a client's wait for its first connection.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cmdstalk_py.server import limits as p
from cmdstalk_py.server.config import (
    DEFAULT_FSYNC_MS,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SEGMENT_SIZE,
)

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
    _add_queue_flags(ap)
    _add_binlog_flags(ap)
    ap.add_argument("-V", dest="verbose", action="count", default=0, help="increase verbosity")
    ap.add_argument(
        "-v", "--version", dest="version", action="store_true", help="show version and exit"
    )
    ap.add_argument("-h", "--help", action="help", help="show this help and exit")
    return ap


def _add_queue_flags(ap: argparse.ArgumentParser) -> None:
    """Where to listen and the job size limit."""
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


def _add_binlog_flags(ap: argparse.ArgumentParser) -> None:
    """The write-ahead log: its directory, fsync policy and file size."""
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


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The flags, checked; exits with status 2 and one line on stderr when one is wrong."""
    return build_parser().parse_args(argv)
