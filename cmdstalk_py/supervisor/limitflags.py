"""The ``cmdstalk`` options that bound a command's process tree (issue #29), as one decorator.

The flags and their ``CMDSTALK_*`` variables; the config file takes the same keys
(``max_memory``, ``max_cpu``, ``max_procs``, ``on_limit``) through these options
(``poolfile.pool_flags``). ``--limits-via`` is supervisor-wide (an ``Extras`` field: command
line and variable only): which mechanism enforces them, ``process.cgroup`` or
``process.usage``'s /proc samples.
"""

from __future__ import annotations

from cmdstalk_py.supervisor import numbers
from cmdstalk_py.supervisor.config import parse_on_limit
from cmdstalk_py.supervisor.flagkit import option, parsed, stack

# --limits-via (``process.cgroup.configure``; not imported here: --help stays light).
MODES = ("auto", "cgroup", "proc")


def parse_limits_via(text: str) -> str:
    """``auto``, ``cgroup`` or ``proc`` (any case)."""
    mode = text.strip().lower()
    if mode not in MODES:
        raise ValueError(f"{text!r} is not one of {', '.join(MODES)}")
    return mode


limit_options = stack(
    [
        option(
            "--max-memory",
            env="MAX_MEMORY",
            metavar="SIZE",
            type=numbers.Size(),
            default=None,
            help="Kill a command whose process tree holds more resident memory than SIZE "
            "(512M, 2G) and bury the job (reason memory).",
        ),
        option(
            "--max-cpu",
            env="MAX_CPU",
            metavar="SECONDS",
            type=numbers.seconds(0.01, numbers.MAX_U32),
            default=None,
            help="Kill a command whose process tree used this much CPU (user + system) and "
            "bury the job (reason cpu).",
        ),
        option(
            "--max-procs",
            env="MAX_PROCS",
            metavar="N",
            type=numbers.count(1, numbers.MAX_PROCS),
            default=None,
            help="Kill a command with more than N processes alive in its tree and bury the "
            "job (reason procs).",
        ),
        option(
            "--on-limit",
            env="ON_LIMIT",
            metavar="bury|release",
            default="bury",
            show_default=True,
            callback=parsed(parse_on_limit),
            help="A job killed over --max-memory, --max-cpu or --max-procs is buried, or "
            "released with backoff (bounded by --max-releases).",
        ),
        option(
            "--limits-via",
            env="LIMITS_VIA",
            metavar="auto|cgroup|proc",
            default="auto",
            show_default=True,
            callback=parsed(parse_limits_via),
            help="How limits are enforced: a cgroup per limited job (hard limits, exact "
            "figures; needs a cgroup the supervisor may manage), /proc samples, or auto: "
            "a cgroup when there is one, else /proc.",
        ),
    ]
)
