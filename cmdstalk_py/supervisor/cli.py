"""The ``cmdstalk`` command line: Go cmdstalk's flags (both spellings) plus the new ones.

``main()`` rewrites Go-style arguments (``-all -per-tube=6``) into GNU form (``goflags``),
click parses and validates them (a bad value is one line and exit status 2), and
``wiring.run_supervisor`` wires logging, observers (event log, metrics, systemd) and, with
``--embedded``, the bundled server around a ``Supervisor``. Every option can also come from
``CMDSTALK_<NAME>``.

The options of the brokers and their jobs are here; each other concern is one decorator from
its own module, in ``--help`` order: ``embedflags`` (``--embedded``, binlog), ``opsflags``
(logs, events, metrics, ``--http``), ``poolflags`` (``--workers``, limits, rates,
``--config``), ``fateflags`` (#19). Each option's parameter name is its ``Config`` (or
``Extras``) field, so the command and the config file (``poolfile``) map them the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import click

from cmdstalk_py import __version__
from cmdstalk_py.supervisor import configmode, goflags, numbers
from cmdstalk_py.supervisor.config import (
    DEFAULT_ADDRESS,
    DEFAULT_SHELL,
    DEFAULT_TUBE,
    SUPERVISOR_FIELDS,
    Config,
    parse_addresses,
    parse_exit_codes,
    parse_shell,
    parse_tubes,
    validate_cmd,
)
from cmdstalk_py.supervisor.embedflags import embedded_options
from cmdstalk_py.supervisor.extras import Extras
from cmdstalk_py.supervisor.fateflags import fate_options
from cmdstalk_py.supervisor.flagkit import option as _option
from cmdstalk_py.supervisor.flagkit import parsed as _parsed
from cmdstalk_py.supervisor.opsflags import http_options, log_options
from cmdstalk_py.supervisor.poolflags import check_workers, config_options, pool_options


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
    "--output-rate",
    env="OUTPUT_RATE",
    metavar="LINES",
    type=numbers.count(0, numbers.MAX_OUTPUT_RATE),
    default=1000,
    show_default=True,
    help="Output lines (stdout and stderr) a job may log per second, ten seconds' worth at "
    "once; more are counted, not logged. 0: no limit.",
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
@embedded_options  # --embedded, --embedded-max-job-size, --binlog*
@log_options  # --log-format, --log-level, --events, --metrics
@pool_options  # --workers, --tube-limit, --tube-rate (issue #18)
@http_options  # --http, --http-token (issue #20)
@config_options  # --config, --check
@fate_options  # --on-exit, --on-timeout, --backoff-jitter, --keep-alive, --max-runtime
@click.version_option(__version__, "--version", prog_name="cmdstalk")
def command(**params: Any) -> None:
    """Run a command for every beanstalkd job: the payload goes to its stdin; exit 0 deletes
    the job, another exit releases it with backoff, a TTR overrun kills and buries it.
    """
    if params["binlog"] is not None and not params["embedded"]:
        raise click.BadParameter(
            "only the --embedded server has a binlog; give --embedded too", param_hint="--binlog"
        )
    check_workers(params["workers"])
    extras = _extras(params)
    if params["config_file"] is not None or params["check"]:
        supervisor = {name: params[name] for name in SUPERVISOR_FIELDS}
        sys.exit(configmode.run(params["config_file"], params["check"], extras, supervisor))
    if params["cmd"] is None:  # _cmd_unless_config already said so; this tells mypy
        raise click.MissingParameter(param_hint="'--cmd'", param_type="option")
    from cmdstalk_py.supervisor.wiring import run_supervisor  # what runs: only now

    sys.exit(run_supervisor(_config(params), extras))


def _extras(params: dict[str, Any]) -> Extras:
    """The supervisor-wide options around the pools: the embedded server, logs, ops."""
    names = {f.name for f in fields(Extras)} - {"binlog_fsync_ms", "reload"}
    extras = {name: params[name] for name in names if name in params}
    extras["log_level"] = params["log_level"].upper()
    return Extras(binlog_fsync_ms=params["binlog_fsync"], **extras)


def _config(params: dict[str, Any]) -> Config:
    """The one pool of the command line: each option's parameter is its ``Config`` field."""
    names = {f.name for f in fields(Config)}
    kwargs = {name: value for name, value in params.items() if name in names}
    address = params["address"]
    servers: Servers = (address,) if isinstance(address[0], str) else address
    kwargs.update(host=servers[0][0], port=servers[0][1])
    kwargs.update(servers=servers if len(servers) > 1 else ())
    kwargs["on_timeout"] = params["on_timeout"].lower()
    return Config(**kwargs)


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
