"""The ``cmdstalk`` command line (the supervisor); filled in by the supervisor issue."""

from __future__ import annotations

import click

from cmdstalk_py import __version__


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version")
def main() -> None:
    """Run a command for every beanstalkd job (not implemented yet)."""
    raise click.UsageError("the supervisor is not implemented yet")
