"""``cmdstalk --config FILE [--check]``: load the pools, print them or run them.

The command line hands over here once ``--config`` is given: the file sets every pool
option, so a pool option given as a flag is refused (it would be silently ignored) and one
from a ``CMDSTALK_*`` variable is ignored (``flagkit``: the shell may export it for
``cmdstalk-ctl``; ``--check`` lists it); the supervisor-wide flags (``--max-jobs``,
``--shutdown-timeout``, ``--batch-scheduling``) apply to every pool, and a bad file is one
``Error:`` line naming the file and the key, exit status 2.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from cmdstalk_py.client.names import format_address
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.extras import Extras
from cmdstalk_py.supervisor.flagkit import ignored_envvars
from cmdstalk_py.supervisor.keytext import printable


def run(path: Path | None, check: bool, extras: Extras, supervisor: dict[str, Any]) -> int:
    """The exit status of ``cmdstalk --config path [--check]``."""
    # poolfile takes its rules from the command's flags, so it imports the command line:
    # imported here, not at the top, the two modules do not import each other on start.
    from cmdstalk_py.supervisor import poolfile

    if path is None:
        raise click.UsageError("--check needs --config FILE")
    _reject_pool_flags(poolfile.pool_flags())
    try:
        pools = poolfile.load_pools(path)
    except poolfile.PoolFileError as e:
        _refuse(str(e))  # one line naming the file and the key, exit 2 as click's errors
    pools = tuple(dataclasses.replace(pool, **supervisor) for pool in pools)
    if check:
        click.echo(f"{path}: {len(pools)} pool{'s' if len(pools) > 1 else ''}, valid")
        ignored = ignored_envvars(click.get_current_context())
        if ignored:
            click.echo(f"ignored (the file sets pool options): {', '.join(ignored)}")
        click.echo(describe(pools))
        return 0

    def reload() -> tuple[Config, ...]:
        """SIGHUP: the file again, with the same supervisor-wide flags (raises when bad)."""
        return tuple(dataclasses.replace(p, **supervisor) for p in poolfile.load_pools(path))

    from cmdstalk_py.supervisor.wiring import run_supervisor  # what runs: only now

    return run_supervisor(pools, dataclasses.replace(extras, reload=reload))


def _refuse(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(2)


def _reject_pool_flags(flags: dict[str, click.Option]) -> None:
    ctx = click.get_current_context()
    address = [p for p in ctx.command.params if p.name == "address"]
    for key, flag in {"address": address[0], **flags}.items():
        if flag.name and ctx.get_parameter_source(flag.name) is ParameterSource.COMMANDLINE:
            raise click.UsageError(
                f"{flag.opts[-1]} is a pool option: with --config, set {key} in the file"
            )


# ``--check``: the resolved pools, one block each, the options a pool file sets first.
_SHOWN_FIRST = ("host", "port", "servers", "tubes", "all_tubes", "workers", "per_tube", "cmd")
_HIDDEN = frozenset({"pool", *_SHOWN_FIRST})


def describe(configs: tuple[Config, ...]) -> str:
    """The resolved pools as ``cmdstalk --config FILE --check`` prints them."""
    from cmdstalk_py.supervisor.poolfile import FILE_KEYS, pool_keys

    keys = pool_keys()
    return "\n\n".join(_describe_pool(c, FILE_KEYS, keys) for c in configs)


def _describe_pool(c: Config, names: dict[str, str], keys: frozenset[str]) -> str:
    servers = c.servers or ((c.host, c.port),)
    rows = [
        ("servers", ", ".join(format_address(h, p) for h, p in servers)),
        ("tubes", "all (every tube, including ones created later)" if c.all_tubes
         else ", ".join(c.tubes)),
        ("workers", f"{c.workers} shared by all tubes, per server" if c.workers is not None
         else f"{c.per_tube} per tube (per_tube), per server"),
        ("command", c.cmd),
    ]
    for f in fields(Config):
        key = names.get(f.name, f.name)
        if f.name not in _HIDDEN and key in keys:  # what the file can set, resolved
            rows.append((key, _show(getattr(c, f.name))))
    width = max(len(k) for k, _ in rows)
    # A command or an env value may hold a line break or an escape sequence: shown escaped,
    # one row each, never acted on by the terminal.
    lines = (f"  {k:<{width}}  {printable(v)}" for k, v in rows)
    return "\n".join([f"[pools.{c.pool}]", *lines])


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, frozenset):
        return ",".join(str(v) for v in sorted(value)) or "-"
    if isinstance(value, tuple):
        if value and all(isinstance(v, tuple) for v in value):
            return ", ".join(_show_entry(v) for v in value) or "-"
        return shlex.join(str(v) for v in value) or "-"
    return str(value)


def _show_entry(entry: tuple[Any, ...]) -> str:
    if len(entry) == 3:  # (tube, per second, burst)
        return f"{entry[0]}={entry[1]:g}/s burst {entry[2]:g}"
    return f"{entry[0]}={entry[1]}"
