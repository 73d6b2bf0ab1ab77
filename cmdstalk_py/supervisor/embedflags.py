"""``cmdstalk --embedded``: the bundled server in-process, and its binlog options.

They wire a server beside the supervisor (``extras.Extras``), so no pool or config file
key carries them.
"""

from __future__ import annotations

import click

from cmdstalk_py.supervisor import numbers
from cmdstalk_py.supervisor.flagkit import option, stack

embedded_options = stack(
    [
        option(
            "--embedded/--no-embedded",
            env="EMBEDDED",
            default=False,
            help="Start the bundled beanstalkd-compatible server in-process on --address.",
        ),
        option(
            "--embedded-max-job-size",
            env="EMBEDDED_MAX_JOB_SIZE",
            metavar="BYTES",
            type=numbers.count(1),
            default=None,
            help="Max job size of the --embedded server, bytes.",
        ),
        option(
            "--binlog",
            env="BINLOG",
            metavar="DIR",
            type=click.Path(file_okay=False),
            default=None,
            help="With --embedded: keep jobs in a write-ahead log in DIR (cmdstalk-server -b).",
        ),
        option(
            "--binlog-fsync",
            env="BINLOG_FSYNC",
            metavar="MS",
            type=numbers.count(0),
            default=50,
            show_default=True,
            help="With --binlog: fsync at most every MS ms; 0 = before every reply (-f).",
        ),
        option(
            "--binlog-no-fsync/--binlog-fsync-on",
            env="BINLOG_NO_FSYNC",
            default=False,
            help="With --binlog: never fsync (-F).",
        ),
        option(
            "--binlog-size",
            env="BINLOG_SIZE",
            metavar="BYTES",
            type=numbers.count(1),
            default=None,
            help="With --binlog: size of each binlog file (-s; default 10485760).",
        ),
    ]
)
