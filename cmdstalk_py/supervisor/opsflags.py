"""``cmdstalk``'s operator options: logging, the event log, metrics, the dashboard.

Supervisor-wide (``extras.Extras``): a config file's pools share them, so they stay flags.
Two decorators, because ``--help`` lists the pool options between them.
"""

from __future__ import annotations

import click

from cmdstalk_py.supervisor.flagkit import option, stack

log_options = stack(
    [
        option(
            "--log-format",
            env="LOG_FORMAT",
            type=click.Choice(["text", "json"]),
            default="text",
            show_default=True,
            help="Log line format on stderr.",
        ),
        option(
            "--log-level",
            env="LOG_LEVEL",
            default="INFO",
            show_default=True,
            type=click.Choice(
                ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False
            ),
            help="Least severe level logged.",
        ),
        option(
            "--events",
            env="EVENTS",
            default=None,
            metavar="PATH",
            help="Append one JSON line per finished job to PATH ('-' for stdout).",
        ),
        option(
            "--metrics",
            env="METRICS",
            default=None,
            metavar="HOST:PORT",
            help="Serve Prometheus metrics on HOST:PORT (:PORT listens on 127.0.0.1).",
        ),
    ]
)

http_options = stack(
    [
        option(
            "--http",
            env="HTTP",
            default=None,
            metavar="HOST:PORT",
            help="Serve the live dashboard, /api and /metrics on HOST:PORT (:PORT listens on "
            "127.0.0.1).",
        ),
        option(
            "--http-token",
            env="HTTP_TOKEN",
            default=None,
            metavar="TOKEN",
            help="Enable the dashboard's actions (kick, delete, pause, drain) for POSTs "
            "carrying this token; prefer the environment variable to keep it out of ps.",
        ),
        option(
            "--http-allow-host",
            env="HTTP_ALLOW_HOST",
            multiple=True,
            metavar="NAME",
            help="A Host name the dashboard answers besides the address it listens on (and "
            "localhost on loopback): the name in the browser's address bar. Repeatable; "
            "other names are refused (DNS rebinding).",
        ),
    ]
)
