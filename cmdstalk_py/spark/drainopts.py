"""``cmdstalk-spark drain``'s supervisor options: the flags (each means what it means for
``cmdstalk``) and the ``Config`` they build. Imports click only, so ``--help`` stays fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cmdstalk_py.client.names import DEFAULT_ADDRESS

if TYPE_CHECKING:
    from cmdstalk_py.supervisor.config import Config

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--address",
        default=DEFAULT_ADDRESS,
        show_default=True,
        envvar="CMDSTALK_ADDRESS",
        show_envvar=True,
        help="beanstalkd host:port; several separated by commas: every tube of every server.",
    ),
    click.option("--tubes", required=True, help="Comma-separated tubes to drain."),
    click.option("--cmd", required=True, help="Command run for each job, payload on its stdin."),
    click.option("--shell", default="/bin/bash -c", show_default=True),
    click.option("--max-releases", type=click.IntRange(1), default=10, show_default=True),
    click.option("--max-timeouts", type=click.IntRange(1), default=1, show_default=True),
    click.option("--backoff-exponent", type=click.FloatRange(0), default=4.0, show_default=True),
    click.option("--backoff-max", type=click.IntRange(0), default=None),
    click.option("--kill-grace", type=click.FloatRange(0), default=2.0, show_default=True),
    click.option("--ttr-margin", type=click.FloatRange(0), default=1.0, show_default=True),
    click.option("--bury-exit-codes", default="", help="Exit codes that bury at once: 65,78."),
]


def supervisor_options(f: F) -> F:
    """Add the server, tube, command and policy options to the command ``f``."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def drain_config(
    address: str, tubes: str, cmd: str, shell: str, bury_exit_codes: str, **policy: Any
) -> Config:
    """The brokers' Config from the options; UsageError (exit 2) when one is invalid."""
    from cmdstalk_py.supervisor import config as cfg

    try:
        servers = cfg.parse_addresses(address)
        (host, port), many = servers[0], len(servers) > 1
        return cfg.Config(
            cmd=cfg.validate_cmd(cmd),
            host=host,
            port=port,
            servers=servers if many else (),
            tubes=cfg.parse_tubes([tubes]),
            shell=cfg.parse_shell(shell),
            bury_exit_codes=cfg.parse_exit_codes(bury_exit_codes),
            **policy,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
