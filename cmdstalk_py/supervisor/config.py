"""The supervisor's configuration: one frozen value, and the parsers that build it.

The parsers raise ``ValueError`` with a one-line message; the command line turns that into
click's usage error (exit 2). Brokers, the dispatcher and ``cmdstalk-spark drain`` all take
a ``Config``, so every default lives here and nowhere else.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from cmdstalk_py.client.names import DEFAULT_ADDRESS as DEFAULT_ADDRESS

# The project's one tube-name rule and address parser; the command line takes them from here.
from cmdstalk_py.client.names import format_address
from cmdstalk_py.client.names import parse_address as parse_address
from cmdstalk_py.client.names import validate_tube as validate_tube
from cmdstalk_py.supervisor.numbers import MAX_OUTPUT_RATE, MAX_PER_TUBE, MAX_U32

DEFAULT_TUBE = "default"
DEFAULT_SHELL = "/bin/bash -c"
# Config fields that concern the whole supervisor, not one pool: command line only, shared
# by every pool of a config file.
SUPERVISOR_FIELDS = frozenset({"max_jobs", "shutdown_timeout", "batch_scheduling"})


@dataclass(frozen=True, slots=True)
class Config:
    """Everything a broker, the dispatcher and the supervisor need to know."""

    cmd: str
    host: str = "127.0.0.1"
    port: int = 11300
    tubes: tuple[str, ...] = (DEFAULT_TUBE,)
    all_tubes: bool = False  # Go's -all: serve every tube, including ones created later
    per_tube: int = 1
    shell: tuple[str, ...] = ("/bin/bash", "-c")
    discover_interval: float = 1.0  # seconds between list-tubes polls with --all
    max_releases: int = 10
    max_timeouts: int = 1
    backoff_exponent: float = 4.0  # delay = releases ** exponent seconds (Go: 4)
    backoff_max: int | None = None  # cap on the delay, seconds; None = no cap (Go)
    kill_grace: float = 2.0  # SIGTERM -> SIGKILL, seconds (shrunk for short TTRs)
    ttr_margin: float = 1.0  # the process is dead this long before the TTR expires
    bury_exit_codes: frozenset[int] = field(default_factory=frozenset)
    max_jobs: int | None = None  # exit after this many jobs
    shutdown_timeout: float | None = None  # None: running jobs may use their whole TTR
    reserve_timeout: int = 1  # seconds, for a standalone run_once; workers block in reserve
    tail_bytes: int = 4096  # stdout/stderr kept for the job result
    output_rate: int = 1000  # output lines a job may log per second (0: no limit)
    io_timeout: float = 30.0  # a server silent this long is treated as gone
    reconnect_max_wait: float = 5.0  # cap of the reconnect backoff, seconds
    batch_scheduling: bool = False  # opt-in: a single broker under SCHED_BATCH (process/sched.py)
    # Pools (issue #18): a Config is one pool; the config file builds several.
    pool: str = "default"  # the pool's name, in logs, metrics and the event log
    workers: int | None = None  # shared workers per server over all tubes; None: per_tube
    tube_limits: tuple[tuple[str, int], ...] = ()  # (tube, most running jobs at once)
    tube_rates: tuple[tuple[str, float, float], ...] = ()  # (tube, starts per second, burst)
    servers: tuple[tuple[str, int], ...] = ()  # several servers; empty: (host, port) alone
    cwd: str | None = None  # the command's working directory; None: the supervisor's
    env: tuple[tuple[str, str], ...] = ()  # added to the command's environment
    # A job's fate (issue #19).
    keep_alive: bool = False  # touch the job ahead of each TTR expiry while it runs
    max_runtime: float | None = None  # with keep_alive: the command's own bound, seconds
    on_exit: tuple[tuple[int, str], ...] = ()  # exit code -> delete|release|backoff|bury
    on_timeout: str = "bury"  # bury|release for a job killed at its TTR or max_runtime
    backoff_jitter: bool = False  # full jitter on release delays

    def __post_init__(self) -> None:
        # The command lines bound every number (``numbers``); a Config built in code must
        # at least not carry nan or inf, which turn every comparison with a deadline false.
        for name in _SECONDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, not {value!r}")
        # The rules the flags and the config file apply, for a Config built in code (the
        # Spark drain, tests): a bad value is one ValueError line here, not a broker's crash.
        self._check_pool()
        self._check_fate()

    def _check_pool(self) -> None:
        for name in ("per_tube", "workers"):
            count = getattr(self, name)
            if count is not None and not 1 <= count <= MAX_PER_TUBE:
                raise ValueError(f"{name} {count!r} is not within 1-{MAX_PER_TUBE}")
        if not 0 <= self.output_rate <= MAX_OUTPUT_RATE:
            raise ValueError(f"output_rate {self.output_rate!r} is not within 0-{MAX_OUTPUT_RATE}")
        for tube, limit in self.tube_limits:
            with _field("tube_limits", tube):
                check_limit(limit)
        for tube, rate, burst in self.tube_rates:
            with _field("tube_rates", tube):
                check_rate(rate)
                check_burst(burst)

    def _check_fate(self) -> None:
        with _field("on_timeout"):
            # The parser's own form (trimmed, lower case), as the flag hands it over.
            if parse_on_timeout(self.on_timeout) != self.on_timeout:
                raise ValueError(f"{self.on_timeout!r} is not lower case")
        for code, action in self.on_exit:
            with _field("on_exit"):
                if parse_on_exit([f"{code}={action}"]) != ((code, action),):
                    raise ValueError(f"{action!r} is not lower case")

    @property
    def address(self) -> str:
        """``host:port`` as given on the command line (IPv6 hosts in brackets)."""
        return format_address(self.host, self.port)

    @property
    def single_broker(self) -> bool:
        """One tube, one broker: the only case where ``batch_scheduling`` applies."""
        workers = self.per_tube if self.workers is None else self.workers
        return (
            not self.all_tubes
            and len(self.tubes) == 1
            and not is_glob(self.tubes[0])
            and workers == 1
            and len(self.servers) <= 1
        )

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """Every server this pool serves."""
        return self.servers or ((self.host, self.port),)

    def run_limit(self, ttr: int) -> tuple[float | None, str | None]:
        """What bounds a job's command (``jobrun.JobRun.deadline``), and by which rule:
        its TTR, or ``max_runtime`` where it comes sooner or ``keep_alive`` lifts the TTR;
        nothing with ``keep_alive`` alone."""
        if self.max_runtime is not None and (self.keep_alive or self.max_runtime <= ttr):
            return self.max_runtime, "max_runtime"
        if self.keep_alive:
            return None, None
        return float(ttr), "ttr"

    def argv(self) -> list[str]:
        """The argv a job runs: the shell words followed by the command (Go: bash -c CMD).

        With ``cwd``, GNU env changes directory first: ``posix_spawn`` (``process.spawn``)
        has no working-directory action in Python, and the supervisor's threads share one.
        """
        if self.cwd is not None:
            return ["/usr/bin/env", "-C", self.cwd, "--", *self.shell, self.cmd]
        return [*self.shell, self.cmd]


_SECONDS = (
    "discover_interval",
    "backoff_exponent",
    "kill_grace",
    "ttr_margin",
    "shutdown_timeout",
    "io_timeout",
    "reconnect_max_wait",
    "max_runtime",
)


@contextmanager
def _field(name: str, tube: str | None = None) -> Iterator[None]:
    """Run a parser's rule on one entry of field ``name``; its error names the field."""
    try:
        if tube is not None:
            validate_tube(tube)
        yield
    except ValueError as e:
        where = f"{name}: tube {tube!r}" if tube is not None else name
        raise ValueError(f"{where}: {e}") from None


def is_glob(name: str) -> bool:
    """A ``tubes`` entry with ``*``, ``?`` or ``[`` is a pattern (tube names have none)."""
    return _WILDCARD.search(name) is not None


_WILDCARD = re.compile(r"[*?[]")


def validate_tube_or_glob(name: str) -> str:
    """A tube name, or a glob that could match one: each wildcard and ``[...]`` class stands
    for a tube-name character, and the rest must be tube-name characters."""
    literal = re.sub(r"\[!?[^]]*\]|[*?]", "a", name) if is_glob(name) else name
    try:
        validate_tube(literal)
    except ValueError as e:
        raise ValueError(str(e).replace(repr(literal), repr(name))) from None
    return name


def parse_tubes(values: Iterable[str]) -> tuple[str, ...]:
    """Comma-separated tube lists (Go's ``-tubes=a,b``), possibly repeated → unique names
    (globs such as ``mail.*`` allowed)."""
    tubes: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and validate_tube_or_glob(name) not in tubes:
                tubes.append(name)
    if not tubes:
        raise ValueError("no tube names given")
    return tuple(tubes)


def parse_exit_codes(text: str) -> frozenset[int]:
    """``"65,78"`` → {65, 78}; exit codes that mean "permanent failure, bury now"."""
    codes: set[int] = set()
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if not part.isdigit() or not 0 < int(part) < 256:
            raise ValueError(f"invalid exit code {part!r}: expected 1-255")
        codes.add(int(part))
    return frozenset(codes)


#: The actions of ``--on-exit CODE=ACTION`` (``policy.ExitAction``).
EXIT_ACTIONS = ("delete", "release", "backoff", "bury")
#: What ``--on-timeout`` may do with a job killed at its TTR or ``--max-runtime``.
TIMEOUT_ACTIONS = ("bury", "release")


def parse_on_exit(values: Iterable[str]) -> tuple[tuple[int, str], ...]:
    """``["75=release", "64-78=bury,3=delete"]`` → ((3, "delete"), (64, "bury"), …).

    Each rule is CODE=ACTION or LOW-HIGH=ACTION (codes 0-255), separated by commas or
    whitespace, repeatable; a later rule for the same code wins. Sorted by code.
    """
    rules: dict[int, str] = {}
    for value in values:
        for rule in value.replace(",", " ").split():
            codes, sep, action = rule.partition("=")
            action = action.strip().lower()
            if not sep or action not in EXIT_ACTIONS:
                raise ValueError(
                    f"invalid exit rule {rule!r}: expected CODE=ACTION, ACTION one of "
                    + ", ".join(EXIT_ACTIONS)
                )
            for code in _code_range(codes):
                rules[code] = action
    return tuple(sorted(rules.items()))


def _code_range(text: str) -> range:
    low, dash, high = text.strip().partition("-")
    if not dash:
        high = low
    if not (low.isdigit() and high.isdigit()) or not 0 <= int(low) <= int(high) <= 255:
        raise ValueError(f"invalid exit code {text!r}: expected 0-255 or LOW-HIGH")
    return range(int(low), int(high) + 1)


def parse_on_timeout(text: str) -> str:
    """``bury`` (the default, as in Go) or ``release`` (along the backoff curve)."""
    action = text.strip().lower()
    if action not in TIMEOUT_ACTIONS:
        raise ValueError(f"invalid timeout action {text!r}: expected bury or release")
    return action


def parse_shell(text: str) -> tuple[str, ...]:
    """``"/bin/bash -c"`` → ("/bin/bash", "-c"); the command is appended as one argument."""
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:
        raise ValueError(f"malformed shell {text!r}: {e}") from None
    if not words:
        raise ValueError("the shell must not be empty")
    return no_nul(words, "the shell")


def validate_cmd(cmd: str) -> str:
    """The job command must contain something to run."""
    if not cmd.strip():
        raise ValueError("the command must not be empty")
    no_nul((cmd,), "the command")
    return cmd


def no_nul(words: tuple[str, ...], what: str) -> tuple[str, ...]:
    """``words`` unless one holds a NUL: the operating system ends an argument there, so no
    job could ever start (a config file can hold one; a command line cannot)."""
    if any("\0" in word for word in words):
        raise ValueError(f"{what} contains a NUL character (\\u0000): the system cannot take it")
    return words


def parse_addresses(text: str) -> tuple[tuple[str, int], ...]:
    """``a:11300,b:11300`` → ((host, port), ...), unique, in order (one or more)."""
    servers: list[tuple[str, int]] = []
    for part in text.split(","):
        part = part.strip()
        if part:
            server = parse_address(part)
            if server not in servers:
                servers.append(server)
    if not servers:
        raise ValueError("no server address given")
    return tuple(servers)


def _tube_value(text: str, what: str) -> tuple[str, str]:
    tube, sep, value = text.partition("=")
    if not sep or not tube.strip() or not value.strip():
        raise ValueError(f"expected TUBE={what}, got {text!r}")
    return validate_tube(tube.strip()), value.strip()


def parse_tube_limits(values: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """``images=2`` (repeatable; the last for a tube wins) → ((tube, most running), ...)."""
    limits: dict[str, int] = {}
    for text in values:
        tube, value = _tube_value(text, "N")
        if not value.isdigit():
            raise ValueError(f"invalid limit {value!r} for tube {tube}: expected 1-{MAX_LIMIT}")
        try:
            limits[tube] = check_limit(int(value))
        except ValueError as e:
            raise ValueError(f"invalid limit for tube {tube}: {e}") from None
    return tuple(limits.items())


#: The bounds of a tube's limit (running jobs) and of a rate's burst (starts at once).
MAX_LIMIT = 1_000_000
MAX_BURST = 1_000_000
#: The fastest rate, starts per second (beanstalkd's own numbers are 32-bit).
MAX_RATE = MAX_U32
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"\s*([^/:]+?)\s*/\s*([smh])\s*(?::\s*(\S+)\s*)?")


def check_limit(count: int) -> int:
    """A tube's limit: at least one running job (0 would never run it), at most MAX_LIMIT."""
    if count < 1:
        raise ValueError(f"{count} is below 1: a limit of 0 would never run the tube")
    if count > MAX_LIMIT:
        raise ValueError(f"{count} is above {MAX_LIMIT}")
    return count


def check_rate(per_second: float) -> float:
    """Starts per second: finite, above 0, at most MAX_RATE."""
    if not (math.isfinite(per_second) and 0 < per_second <= MAX_RATE):
        raise ValueError(f"rate {per_second:g}/s is not above 0 and at most {MAX_RATE}/s")
    return per_second


def check_burst(burst: float) -> float:
    """Starts at once after a quiet spell: 1 to MAX_BURST."""
    if not math.isfinite(burst) or burst < 1:
        raise ValueError(f"burst {burst:g} is below 1")
    if burst > MAX_BURST:
        raise ValueError(f"burst {burst:g} is above {MAX_BURST}")
    return burst


def default_burst(per_second: float) -> float:
    """One second's starts (at least 1): ``5/s`` may start 5 at once after a quiet spell."""
    return max(1.0, per_second)


def parse_rate(text: str) -> tuple[float, float]:
    """``5/s``, ``300/m:20``, ``2.5/h`` → (starts per second, burst); the burst defaults
    to ``default_burst``. The flag and the config file both read rates here."""
    match = _RATE.fullmatch(text)
    try:
        if match is None:
            raise ValueError("expected N/s, N/m or N/h, then :BURST")
        per_second = check_rate(_number(match[1]) / _PER[match[2]])
        burst = default_burst(per_second) if match[3] is None else _number(match[3])
        return per_second, check_burst(burst)
    except ValueError as e:
        raise ValueError(f"invalid rate {text!r}: {e}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"malformed number {text!r}") from None


def parse_tube_rates(values: Iterable[str]) -> tuple[tuple[str, float, float], ...]:
    """``images=5/s:10`` (repeatable) → ((tube, starts per second, burst), ...)."""
    rates: dict[str, tuple[float, float]] = {}
    for text in values:
        tube, value = _tube_value(text, "RATE")
        rates[tube] = parse_rate(value)
    return tuple((t, r, b) for t, (r, b) in rates.items())
