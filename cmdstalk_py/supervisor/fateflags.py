"""The ``cmdstalk`` options that decide a job's fate (issue #19), as one click decorator.

Kept apart from ``cli`` so that the command line stays one screenful per concern: the
parsers are ``config``'s (the pools file uses the same ones), the rules ``policy``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cmdstalk_py.supervisor import numbers
from cmdstalk_py.supervisor.config import (
    TIMEOUT_ACTIONS,
    parse_on_exit,
)
from cmdstalk_py.supervisor.flagkit import parsed

F = Callable[..., Any]


def fate_options(f: F) -> F:
    """Add ``--on-exit``, ``--on-timeout``, ``--backoff-jitter``, ``--keep-alive`` and
    ``--max-runtime`` to a click command (its function takes ``on_exit``, ``on_timeout``,
    ``backoff_jitter``, ``keep_alive``, ``max_runtime``: the ``Config`` field names)."""
    options = [
        click.option(
            "--on-exit",
            envvar="CMDSTALK_ON_EXIT",
            show_envvar=True,
            metavar="CODE=ACTION",
            multiple=True,
            callback=parsed(lambda value: parse_on_exit(value or ())),
            help="What exit CODE (or LOW-HIGH) does to the job: delete, release (no delay), "
            "backoff or bury (repeatable; default: 0 deletes, others back off).",
        ),
        click.option(
            "--on-timeout",
            envvar="CMDSTALK_ON_TIMEOUT",
            show_envvar=True,
            type=click.Choice(TIMEOUT_ACTIONS, case_sensitive=False),
            default="bury",
            show_default=True,
            help="A job killed at its TTR or --max-runtime is buried, or released with "
            "backoff until --max-timeouts.",
        ),
        click.option(
            "--backoff-jitter/--no-backoff-jitter",
            envvar="CMDSTALK_BACKOFF_JITTER",
            show_envvar=True,
            default=False,
            help="Draw each backoff delay at random between 0 and the curve (full jitter).",
        ),
        click.option(
            "--keep-alive/--no-keep-alive",
            envvar="CMDSTALK_KEEP_ALIVE",
            show_envvar=True,
            default=False,
            help="Touch the job ahead of each TTR expiry while its command runs: the TTR "
            "only detects a dead supervisor (bound the command with --max-runtime).",
        ),
        click.option(
            "--max-runtime",
            envvar="CMDSTALK_MAX_RUNTIME",
            show_envvar=True,
            metavar="SECONDS",
            type=numbers.seconds(0.1, numbers.MAX_U32),
            default=None,
            help="Kill a command running this long (TERM, grace, KILL), as at its TTR.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f
