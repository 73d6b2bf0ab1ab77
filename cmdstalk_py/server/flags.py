"""``cmdstalk-server``'s flags (beanstalkd's), defined once in :data:`OPTIONS`.

Two readers share that one definition. :func:`read` takes the plain forms a script or a
test suite uses (``-l ADDR -p PORT -b DIR -V``: each flag a word of its own, each value
the next word) with no imports at all, so that a freshly spawned server listens and
answers as early as it can. Everything else (``-h``, ``-p11300``, ``-VV``, a mistake)
goes to :func:`parse`, argparse built from the same table, which prints the help and the
one-line errors. Values go through the same converters either way.
"""

from __future__ import annotations

import sys

from cmdstalk_py.server import limits
from cmdstalk_py.server.config import (
    DEFAULT_FSYNC_MS,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SEGMENT_SIZE,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

VERSION = "1.12"

_DESCRIPTION = """\
A beanstalkd 1.12-compatible work queue server.

Unlike beanstalkd, which listens on all interfaces (0.0.0.0) by default, cmdstalk-server
listens on 127.0.0.1 unless -l says otherwise. SIGUSR1 enters drain mode (puts are answered
DRAINING); SIGTERM and SIGINT stop the server."""


class BadValue(ValueError):
    """A flag's value that its converter refuses (argparse shows the message)."""


def _count(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise BadValue(f"invalid number: {text!r}") from None
    if value < 0:
        raise BadValue(f"must not be negative: {text!r}")
    return value


def _port(text: str) -> int:
    value = _count(text)
    if value > 65535:
        raise BadValue(f"invalid port: {text!r}")
    return value


class Option:
    """One flag: its spellings, where its value goes and how it is read, its help.

    ``kind``: ``value`` (the next word, through ``convert``), ``count`` (+1 each time),
    ``const`` (sets ``const``), ``true``, or ``help``.
    """

    __slots__ = ("const", "convert", "default", "dest", "help", "kind", "metavar", "words")

    def __init__(
        self,
        words: tuple[str, ...],
        dest: str,
        kind: str,
        help: str,
        default: object = None,
        convert: Callable[[str], object] = str,
        metavar: str | None = None,
        const: object = None,
    ) -> None:
        self.words, self.dest, self.kind, self.help = words, dest, kind, help
        self.default, self.convert, self.metavar, self.const = default, convert, metavar, const


OPTIONS: tuple[Option, ...] = (
    Option(("-l",), "listen", "value", default=DEFAULT_HOST, metavar="ADDR",
           help="listen on address ADDR, or unix:PATH for a unix socket "
           f"(default {DEFAULT_HOST}; beanstalkd's default is all interfaces)"),
    Option(("-p",), "port", "value", default=DEFAULT_PORT, convert=_port, metavar="PORT",
           help=f"listen on TCP port PORT (default {DEFAULT_PORT})"),
    Option(("-z",), "max_job_size", "value", default=limits.DEFAULT_MAX_JOB_SIZE,
           convert=_count, metavar="BYTES",
           help=f"maximum job size in bytes (default {limits.DEFAULT_MAX_JOB_SIZE}, "
           f"at most {limits.MAX_JOB_SIZE_CAP})"),
    Option(("-b",), "binlog_dir", "value", metavar="DIR",
           help="write-ahead log directory: jobs survive restarts and crashes"),
    # -f and -F share one destination: the last one given wins, as in beanstalkd.
    Option(("-f",), "fsync_ms", "value", default=DEFAULT_FSYNC_MS, convert=_count,
           metavar="MS", help=f"fsync at most once every MS milliseconds (default "
           f"{DEFAULT_FSYNC_MS}); -f 0: fsync before every reply that changes state"),
    Option(("-F",), "fsync_ms", "const", const=None, help="never fsync"),
    Option(("-s",), "binlog_size", "value", default=DEFAULT_SEGMENT_SIZE, convert=_count,
           metavar="BYTES", help=f"size of each binlog file (default {DEFAULT_SEGMENT_SIZE})"),
    Option(("-V",), "verbose", "count", default=0, help="increase verbosity"),
    Option(("-v", "--version"), "version", "true", default=False,
           help="show version and exit"),
    Option(("-h", "--help"), "help", "help", help="show this help and exit"),
)
_BY_WORD = {word: o for o in OPTIONS for word in o.words}


class Flags:
    """The flags of one command line, every one set (to its default if not given)."""

    listen: str
    port: int
    max_job_size: int
    binlog_dir: str | None
    fsync_ms: int | None
    binlog_size: int
    verbose: int
    version: bool

    def __init__(self) -> None:
        for o in OPTIONS:
            if o.kind != "help" and not hasattr(self, o.dest):
                setattr(self, o.dest, o.default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Flags) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Flags({vars(self)})"


def read(words: Sequence[str]) -> Flags | None:
    """The flags in their plain forms, or None when :func:`parse` must read them (``-h``,
    a flag glued to its value or to another flag, a value that starts with ``-`` or does
    not convert, an abbreviation, anything unknown)."""
    flags = Flags()
    values = iter(words)
    for word in values:
        o = _BY_WORD.get(word)
        if o is None or o.kind == "help":
            return None
        if o.kind == "value":
            value = next(values, "-")
            if value.startswith("-"):
                return None
            try:
                setattr(flags, o.dest, o.convert(value))
            except ValueError:
                return None
        elif o.kind == "count":
            setattr(flags, o.dest, getattr(flags, o.dest) + 1)
        else:
            setattr(flags, o.dest, o.const if o.kind == "const" else True)
    return flags


def parse(words: Sequence[str]) -> Flags:
    """Every form argparse takes; exits with the help (``-h``), or with status 2 and one
    line on stderr when a flag is wrong."""
    return build_parser().parse_args(words, namespace=Flags())


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of :data:`OPTIONS` (``-h`` prints its help)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            # One clear line and exit status 2, like beanstalkd's usage errors.
            sys.stderr.write(f"cmdstalk-server: {message} (see -h)\n")
            raise SystemExit(2)

    ap = Parser(prog="cmdstalk-server", description=_DESCRIPTION, add_help=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    for o in OPTIONS:
        if o.kind == "value":
            ap.add_argument(*o.words, dest=o.dest, metavar=o.metavar, default=o.default,
                            type=_argparse_type(o.convert), help=o.help)
        elif o.kind in ("count", "help"):
            ap.add_argument(*o.words, dest=o.dest, action=o.kind, help=o.help)
        elif o.kind == "const":
            ap.add_argument(*o.words, dest=o.dest, action="store_const", const=o.const,
                            help=o.help)
        else:
            ap.add_argument(*o.words, dest=o.dest, action="store_true", help=o.help)
    return ap


def _argparse_type(convert: Callable[[str], object]) -> Callable[[str], object]:
    import argparse

    def typed(text: str) -> object:
        try:
            return convert(text)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return typed
