"""The ``cmdstalk-ctl`` command group: where the servers are, and how a command ends.

Exit codes, for scripts: 0 done; 1 not found (a job, a tube, an event record, nothing in
the state peeked); 2 usage; 3 a server or supervisor could not be reached, broke the
connection, refused the command (draining, out of memory…) or sent a reply ctl cannot
trust (read commands still print what the others answered).
"""

from __future__ import annotations

from typing import Any

import click

from cmdstalk_py import __version__
from cmdstalk_py.ctl import bulk, follow, read, write
from cmdstalk_py.ctl.servers import Target, parse_addresses

EPILOG = (
    "Exit status: 0 done, 1 not found (job, tube, event record, empty peek), 2 usage, "
    "3 a server or supervisor unreachable, refusing, or sending a bad reply."
)


def _addresses(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    try:
        return tuple(parse_addresses(value))
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 80},
    epilog=EPILOG,
)
@click.option(
    "--address",
    "-a",
    default="127.0.0.1:11300",
    show_default=True,
    envvar="CMDSTALK_ADDRESS",
    show_envvar=True,
    metavar="HOST:PORT[,…]",
    callback=_addresses,
    help="beanstalkd server(s), comma-separated; read commands show each.",
)
@click.option(
    "--timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds to wait to connect, and for each command's whole reply.",
)
@click.version_option(__version__, prog_name="cmdstalk-ctl")
@click.pass_context
def ctl(ctx: click.Context, address: tuple[str, ...], timeout: float) -> None:
    """Look at and act on beanstalkd queues and cmdstalk supervisors."""
    ctx.obj = Target(address, timeout)


for _module in (read, write, bulk, follow):
    for _command in _module.COMMANDS:
        ctl.add_command(_command)


def main(argv: list[str] | None = None) -> Any:
    """The ``cmdstalk-ctl`` entry point."""
    return ctl.main(args=argv, prog_name="cmdstalk-ctl")
