"""What every ``cmdstalk`` flag module builds its options with.

An option also comes from ``CMDSTALK_<NAME>`` (shown in ``--help``); a parser's one-line
``ValueError`` becomes click's usage error (exit 2); a module's options are one decorator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

T = TypeVar("T")
F = Callable[..., Any]
Decorator = Callable[[F], F]


def option(*decls: str, env: str, **kw: Any) -> Decorator:
    """A click option that also reads ``CMDSTALK_<env>``."""
    return click.option(*decls, envvar=f"CMDSTALK_{env}", show_envvar=True, **kw)


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
