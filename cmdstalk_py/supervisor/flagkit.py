"""What every ``cmdstalk`` flag module builds its options with.

An option also comes from ``CMDSTALK_<NAME>`` (shown in ``--help``); a parser's one-line
``ValueError`` becomes click's usage error (exit 2); a module's options are one decorator.

With ``--config``, the file sets every pool option: a pool option's ``CMDSTALK_<NAME>`` is
then ignored (and listed by ``ignored_envvars``), so that one shell can export
``CMDSTALK_ADDRESS`` for ``cmdstalk-ctl`` and still start ``cmdstalk --config``. A pool
option given as a flag beside ``--config`` is refused instead (``configmode``): a flag is
typed for this one command, a variable is the shell's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, TypeVar

import click

from cmdstalk_py.supervisor.config import SUPERVISOR_FIELDS, Config

T = TypeVar("T")
F = Callable[..., Any]
Decorator = Callable[[F], F]


# The parameters a config file sets for each pool: Config's fields, less the supervisor's.
POOL_PARAMS = frozenset({f.name for f in fields(Config)} - SUPERVISOR_FIELDS | {"address"})
_IGNORED = "cmdstalk.ignored_envvars"  # ctx.meta key


class _Option(click.Option):
    """An option whose variable gives way to ``--config`` when it sets a pool option."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        value = super().resolve_envvar_value(ctx)
        # --config is eager: processed before every option that may consult it here.
        if value is not None and self.name in POOL_PARAMS and ctx.params.get("config_file"):
            ctx.meta.setdefault(_IGNORED, []).append(self.envvar)
            return None
        return value


def ignored_envvars(ctx: click.Context) -> list[str]:
    """The ``CMDSTALK_*`` variables set but ignored because ``--config`` sets pool options."""
    return sorted(ctx.meta.get(_IGNORED, []))


def option(*decls: str, env: str, **kw: Any) -> Decorator:
    """A click option that also reads ``CMDSTALK_<env>``."""
    return click.option(*decls, cls=_Option, envvar=f"CMDSTALK_{env}", show_envvar=True, **kw)


def parsed(parse: Callable[[Any], T]) -> Callable[[click.Context, click.Parameter, Any], T]:
    """A click callback that turns a parser's ValueError into click's one-line usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> T:
        try:
            return parse(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None

    return callback


def stack(options: Sequence[Decorator]) -> Decorator:
    """One decorator adding ``options`` so that ``--help`` lists them in this order."""

    def decorate(f: F) -> F:
        for add in reversed(options):
            f = add(f)
        return f

    return decorate
