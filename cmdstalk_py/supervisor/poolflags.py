"""``cmdstalk``'s pool options (issue #18): shared workers, per-tube limits and rates, and
``--config FILE [--check]``, which takes every pool option from a file instead.

The parsers are ``config``'s; the config file checks its keys through these same flags
(``poolfile.pool_flags``).
"""

from __future__ import annotations

from pathlib import Path

import click

from cmdstalk_py.supervisor import numbers
from cmdstalk_py.supervisor.config import parse_tube_limits, parse_tube_rates
from cmdstalk_py.supervisor.flagkit import option, parsed, stack

pool_options = stack(
    [
        option(
            "--workers",
            env="WORKERS",
            metavar="N",
            type=numbers.count(1, numbers.MAX_PER_TUBE),
            default=None,
            help="N shared workers per server, each watching every tube of --tubes/--all/"
            "globs: the server hands out the most urgent job across tubes (instead of "
            "--per-tube).",
        ),
        option(
            "--tube-limit",
            "tube_limits",
            env="TUBE_LIMIT",
            metavar="TUBE=N",
            multiple=True,
            callback=parsed(parse_tube_limits),
            help="At most N jobs of TUBE running at once (repeatable); its other jobs wait "
            "queued.",
        ),
        option(
            "--tube-rate",
            "tube_rates",
            env="TUBE_RATE",
            metavar="TUBE=N/s[:BURST]",
            multiple=True,
            callback=parsed(parse_tube_rates),
            help="At most N job starts of TUBE per second (or /m, /h), BURST at once "
            "(default: one second's worth); repeatable.",
        ),
    ]
)

config_options = stack(
    [
        option(
            "--config",
            "config_file",
            env="CONFIG",
            metavar="FILE",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            is_eager=True,  # before --cmd, which it makes optional
            help="Run the pools of a TOML file; pool options then go in the file: pool "
            "flags are refused, their CMDSTALK_* variables ignored.",
        ),
        option(
            "--check/--no-check",
            env="CHECK",
            default=False,
            help="With --config: validate the file, print the resolved pools and exit.",
        ),
    ]
)


def check_workers(workers: int | None) -> None:
    """``--workers`` shares workers across tubes; ``--per-tube`` gives each its own."""
    source = click.get_current_context().get_parameter_source("per_tube")
    if workers is not None and source is not click.core.ParameterSource.DEFAULT:
        raise click.BadParameter(
            "give --workers (shared by all tubes) or --per-tube, not both",
            param_hint="--workers",
        )
