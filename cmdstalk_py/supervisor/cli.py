"""The ``cmdstalk`` command line: Go cmdstalk's flags (both spellings) plus the new ones.

``main()`` rewrites Go-style arguments (``-all -per-tube=6``) into GNU form (``goflags``),
click parses and validates them (a bad value is one line and exit status 2), and
``wiring.run_supervisor`` wires logging, observers (event log, metrics, systemd) and, with
``--embedded``, the bundled server around a ``Supervisor``. Every option can also come from
``CMDSTALK_<NAME>``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from cmdstalk_py import __version__
from cmdstalk_py.supervisor import configmode, goflags, numbers
from cmdstalk_py.supervisor.config import (
    DEFAULT_ADDRESS,
    DEFAULT_SHELL,
    DEFAULT_TUBE,
    Config,
    parse_addresses,
    parse_exit_codes,
    parse_shell,
    parse_tube_limits,
    parse_tube_rates,
    parse_tubes,
    validate_cmd,
)
from cmdstalk_py.supervisor.fateflags import fate_options
from cmdstalk_py.supervisor.wiring import Extras, run_supervisor

T = TypeVar("T")


def _parsed(parse: Callable[[Any], T]) -> Callable[[click.Context, click.Parameter, Any], T]:
    """A click callback that turns a parser's ValueError into click's one-line usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> T:
        try:
            return parse(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None

    return callback


def _cmd_unless_config(ctx: click.Context, param: click.Parameter, value: Any) -> str | None:
    """``--cmd`` is required, unless ``--config`` (processed first: eager) gives the pools."""
    if value is None:
        if ctx.params.get("config_file") is None:
            raise click.MissingParameter(ctx=ctx, param=param)
        return None
    return _parsed(validate_cmd)(ctx, param, value)


Servers = tuple[tuple[str, int], ...]


def _address_or_servers(text: str) -> tuple[str, int] | Servers:
    """One HOST:PORT as (host, port), as ever; several as a tuple of them."""
    servers = parse_addresses(text)
    return servers[0] if len(servers) == 1 else servers


def _option(*decls: str, env: str, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(*decls, envvar=f"CMDSTALK_{env}", show_envvar=True, **kw)


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Go cmdstalk spellings work too: -address=HOST:PORT -all -cmd=CMD -per-tube=N "
    "-tubes=a,b.",
)
@_option(
    "--address",
    env="ADDRESS",
    metavar="HOST:PORT[,HOST:PORT...]",
    default=DEFAULT_ADDRESS,
    show_default=True,
    callback=_parsed(_address_or_servers),
    help="beanstalkd server, HOST:PORT; several, comma-separated: every one is served.",
)
@_option(
    "--all/--no-all",
    "all_tubes",
    env="ALL",
    default=False,
    help="Serve every tube, including tubes created later (polls list-tubes).",
)
@_option(
    "--cmd",
    env="CMD",
    metavar="CMD",
    default=None,
    callback=_cmd_unless_config,
    help="Command run for each job, with the payload on its stdin.",
)
@_option(
    "--per-tube",
    env="PER_TUBE",
    metavar="N",
    type=numbers.count(1, numbers.MAX_PER_TUBE),
    default=1,
    show_default=True,
    help="Brokers (concurrent jobs) per tube.",
)
@_option(
    "--tubes",
    env="TUBES",
    metavar="TUBE[,TUBE...]",
    multiple=True,
    default=[DEFAULT_TUBE],
    show_default=True,
    callback=_parsed(parse_tubes),
    help="Comma-separated tubes to serve (repeatable).",
)
@_option(
    "--discover-interval",
    env="DISCOVER_INTERVAL",
    metavar="SECONDS",
    type=numbers.seconds(0.05),
    default=1.0,
    show_default=True,
    help="Seconds between tube discoveries with --all.",
)
@_option(
    "--max-releases",
    env="MAX_RELEASES",
    metavar="N",
    type=numbers.count(1),
    default=10,
    show_default=True,
    help="Bury, unrun, a job reserved with N or more releases (each kick forgives one).",
)
@_option(
    "--max-timeouts",
    env="MAX_TIMEOUTS",
    metavar="N",
    type=numbers.count(1),
    default=1,
    show_default=True,
    help="Bury, unrun, a job that timed out on the server this often.",
)
@_option(
    "--backoff-exponent",
    env="BACKOFF_EXPONENT",
    metavar="X",
    type=numbers.FiniteRange(0, numbers.MAX_BACKOFF_EXPONENT),
    default=4.0,
    show_default=True,
    help="Release delay is releases**X seconds.",
)
@_option(
    "--backoff-max",
    env="BACKOFF_MAX",
    metavar="SECONDS",
    type=numbers.count(0),
    default=None,
    help="Cap on the release delay, seconds (default: no cap).",
)
@_option(
    "--kill-grace",
    env="KILL_GRACE",
    metavar="SECONDS",
    type=numbers.seconds(),
    default=2.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL (less for short TTRs).",
)
@_option(
    "--ttr-margin",
    env="TTR_MARGIN",
    metavar="SECONDS",
    type=numbers.seconds(),
    default=1.0,
    show_default=True,
    help="A job is killed this long before its TTR (at most TTR/4).",
)
@_option(
    "--shell",
    env="SHELL",
    metavar="WORDS",
    default=DEFAULT_SHELL,
    show_default=True,
    callback=_parsed(parse_shell),
    help="Shell that runs --cmd (the command is its last argument).",
)
@_option(
    "--bury-exit-codes",
    env="BURY_EXIT_CODES",
    metavar="CODE[,CODE...]",
    default="",
    callback=_parsed(parse_exit_codes),
    help="Comma-separated exit codes that bury the job at once (permanent failure).",
)
@_option(
    "--max-jobs",
    env="MAX_JOBS",
    metavar="N",
    type=numbers.count(1, 2**63 - 1),
    default=None,
    help="Exit 0 after this many jobs.",
)
@_option(
    "--shutdown-timeout",
    env="SHUTDOWN_TIMEOUT",
    metavar="SECONDS",
    type=numbers.seconds(0, numbers.MAX_U32),
    default=None,
    help="On SIGTERM, kill and release jobs still running after this many "
    "seconds (default: let each run to its TTR deadline).",
)
@_option(
    "--batch-scheduling/--no-batch-scheduling",
    env="BATCH_SCHEDULING",
    default=False,
    help="With a single broker (one tube, --per-tube 1, no --all), run it under "
    "SCHED_BATCH (Linux): it never preempts the commands it starts, which keep the "
    "supervisor's own policy. Off by default.",
)
@_option(
    "--embedded/--no-embedded",
    env="EMBEDDED",
    default=False,
    help="Start the bundled beanstalkd-compatible server in-process on --address.",
)
@_option(
    "--embedded-max-job-size",
    env="EMBEDDED_MAX_JOB_SIZE",
    metavar="BYTES",
    type=numbers.count(1),
    default=None,
    help="Max job size of the --embedded server, bytes.",
)
@_option(
    "--binlog",
    env="BINLOG",
    metavar="DIR",
    type=click.Path(file_okay=False),
    default=None,
    help="With --embedded: keep jobs in a write-ahead log in DIR (cmdstalk-server -b).",
)
@_option(
    "--binlog-fsync",
    env="BINLOG_FSYNC",
    metavar="MS",
    type=numbers.count(0),
    default=50,
    show_default=True,
    help="With --binlog: fsync at most every MS ms; 0 = before every reply (-f).",
)
@_option(
    "--binlog-no-fsync/--binlog-fsync-on",
    env="BINLOG_NO_FSYNC",
    default=False,
    help="With --binlog: never fsync (-F).",
)
@_option(
    "--binlog-size",
    env="BINLOG_SIZE",
    metavar="BYTES",
    type=numbers.count(1),
    default=None,
    help="With --binlog: size of each binlog file (-s; default 10485760).",
)
@_option(
    "--log-format",
    env="LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log line format on stderr.",
)
@_option(
    "--log-level",
    env="LOG_LEVEL",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    help="Least severe level logged.",
)
@_option(
    "--events",
    env="EVENTS",
    default=None,
    metavar="PATH",
    help="Append one JSON line per finished job to PATH ('-' for stdout).",
)
@_option(
    "--metrics",
    env="METRICS",
    default=None,
    metavar="HOST:PORT",
    help="Serve Prometheus metrics on HOST:PORT (:PORT listens on 127.0.0.1).",
)
# -- pools (issue #18) -------------------------------------------------------------------
@_option(
    "--workers",
    env="WORKERS",
    metavar="N",
    type=numbers.count(1, numbers.MAX_PER_TUBE),
    default=None,
    help="N shared workers per server, each watching every tube of --tubes/--all/globs: "
    "the server hands out the most urgent job across tubes (instead of --per-tube).",
)
@_option(
    "--tube-limit",
    "tube_limits",
    env="TUBE_LIMIT",
    metavar="TUBE=N",
    multiple=True,
    callback=_parsed(parse_tube_limits),
    help="At most N jobs of TUBE running at once (repeatable); its other jobs wait queued.",
)
@_option(
    "--tube-rate",
    "tube_rates",
    env="TUBE_RATE",
    metavar="TUBE=N/s[:BURST]",
    multiple=True,
    callback=_parsed(parse_tube_rates),
    help="At most N job starts of TUBE per second (or /m, /h), BURST at once "
    "(default: one second's worth); repeatable.",
)
@_option(
    "--http",
    env="HTTP",
    default=None,
    metavar="HOST:PORT",
    help="Serve the live dashboard, /api and /metrics on HOST:PORT (:PORT listens on "
    "127.0.0.1).",
)
@_option(
    "--http-token",
    env="HTTP_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Enable the dashboard's actions (kick, delete, pause, drain) for POSTs carrying "
    "this token; prefer the environment variable to keep it out of ps.",
)
@_option(
    "--config",
    "config_file",
    env="CONFIG",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    is_eager=True,  # before --cmd, which it makes optional
    help="Run the pools of a TOML file; pool options then go in the file, not in flags.",
)
@_option(
    "--check/--no-check",
    env="CHECK",
    default=False,
    help="With --config: validate the file, print the resolved pools and exit.",
)
@fate_options  # --on-exit, --on-timeout, --backoff-jitter, --keep-alive, --max-runtime
@click.version_option(__version__, "--version", prog_name="cmdstalk")
def command(
    address: tuple[str, int] | Servers,
    all_tubes: bool,
    cmd: str,
    per_tube: int,
    tubes: tuple[str, ...],
    discover_interval: float,
    max_releases: int,
    max_timeouts: int,
    backoff_exponent: float,
    backoff_max: int | None,
    kill_grace: float,
    ttr_margin: float,
    shell: tuple[str, ...],
    bury_exit_codes: frozenset[int],
    max_jobs: int | None,
    shutdown_timeout: float | None,
    batch_scheduling: bool,
    embedded: bool,
    embedded_max_job_size: int | None,
    binlog: str | None,
    binlog_fsync: int,
    binlog_no_fsync: bool,
    binlog_size: int | None,
    log_format: str,
    log_level: str,
    events: str | None,
    metrics: str | None,
    http: str | None,
    http_token: str | None,
    config_file: Path | None,
    check: bool,
    on_exit: tuple[tuple[int, str], ...],
    on_timeout: str,
    backoff_jitter: bool,
    keep_alive: bool,
    max_runtime: float | None,
    workers: int | None,
    tube_limits: tuple[tuple[str, int], ...],
    tube_rates: tuple[tuple[str, float, float], ...],
) -> None:
    """Run a command for every beanstalkd job: the payload goes to its stdin; exit 0 deletes
    the job, another exit releases it with backoff, a TTR overrun kills and buries it.
    """
    if binlog is not None and not embedded:
        raise click.BadParameter(
            "only the --embedded server has a binlog; give --embedded too", param_hint="--binlog"
        )
    source = click.get_current_context().get_parameter_source("per_tube")
    if workers is not None and source is not click.core.ParameterSource.DEFAULT:
        raise click.BadParameter(
            "give --workers (shared by all tubes) or --per-tube, not both",
            param_hint="--workers",
        )
    servers: Servers = (address,) if isinstance(address[0], str) else address
    extras = Extras(
        embedded=embedded,
        embedded_max_job_size=embedded_max_job_size,
        binlog=binlog,
        binlog_fsync_ms=binlog_fsync,
        binlog_no_fsync=binlog_no_fsync,
        binlog_size=binlog_size,
        log_format=log_format,
        log_level=log_level.upper(),
        events=events,
        metrics=metrics,
        http=http,
        http_token=http_token,
    )
    if config_file is not None or check:
        supervisor = {"max_jobs": max_jobs, "shutdown_timeout": shutdown_timeout,
                      "batch_scheduling": batch_scheduling}
        sys.exit(configmode.run(config_file, check, extras, supervisor))
    if cmd is None:  # _cmd_unless_config already said so; this tells the type checker
        raise click.MissingParameter(param_hint="'--cmd'", param_type="option")
    config = Config(
        cmd=cmd,
        host=servers[0][0],
        port=servers[0][1],
        servers=servers if len(servers) > 1 else (),
        workers=workers,
        tube_limits=tube_limits,
        tube_rates=tube_rates,
        tubes=tubes,
        all_tubes=all_tubes,
        per_tube=per_tube,
        shell=shell,
        discover_interval=discover_interval,
        max_releases=max_releases,
        max_timeouts=max_timeouts,
        backoff_exponent=backoff_exponent,
        backoff_max=backoff_max,
        kill_grace=kill_grace,
        ttr_margin=ttr_margin,
        bury_exit_codes=bury_exit_codes,
        max_jobs=max_jobs,
        shutdown_timeout=shutdown_timeout,
        batch_scheduling=batch_scheduling,
        on_exit=on_exit,
        on_timeout=on_timeout.lower(),
        backoff_jitter=backoff_jitter,
        keep_alive=keep_alive,
        max_runtime=max_runtime,
    )
    sys.exit(run_supervisor(config, extras))


def _option_names() -> tuple[list[str], list[str]]:
    """Long option names of ``command``: (those taking a value, boolean flags with --no-)."""
    values: list[str] = []
    flags: list[str] = []
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        longs = [o[2:] for o in param.opts if o.startswith("--")]
        if param.is_flag:
            flags.extend(longs)
        else:
            values.extend(longs)
    return values, flags


def normalize_args(args: Sequence[str]) -> list[str]:
    """``args`` with Go-style spellings (``-all``, ``-per-tube=6``) rewritten for click."""
    values, flags = _option_names()
    return goflags.normalize(args, values, flags)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``cmdstalk`` (also ``python -m cmdstalk_py``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command.main(args=normalize_args(args), prog_name="cmdstalk")
