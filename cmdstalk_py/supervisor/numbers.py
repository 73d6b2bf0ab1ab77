"""The bounds of every numeric option, and the click types that enforce them.

``float()`` accepts ``nan`` and ``inf``, and click's ``FloatRange`` lets ``nan`` through
(every comparison with it is false). A ``nan`` grace kills each job at once and releases it
unrun, an infinite exponent turns every backoff into one second forever, a ``nan`` discovery
interval stops discovery, and an exponent of ``1e6`` overflows the first delay. So every
numeric option has a finite type and an upper bound a real deployment never reaches; a value
outside is one ``Error:`` line and exit status 2, from a flag or from ``CMDSTALK_*`` alike.
``cmdstalk-spark drain`` takes the same options and may use the same types.
"""

from __future__ import annotations

import math
from typing import Any

import click

# beanstalkd's delays, TTRs and sizes are 32-bit: nothing we wait for lasts longer.
MAX_U32 = 2**32 - 1
HOUR = 3600.0

# Go's releases**4 reaches beanstalkd's 32-bit delay cap after ~256 releases; an exponent of
# 10 does after ~9. Larger ones only bury sooner at a one-second first step, or overflow.
MAX_BACKOFF_EXPONENT = 10.0
# One thread and one connection per broker: beyond this a typo, not a plan.
MAX_PER_TUBE = 1000
# Output lines a job may log per second: logging one costs the supervisor microseconds, so
# a million a second is already more than a core.
MAX_OUTPUT_RATE = 1_000_000


class FiniteRange(click.FloatRange):
    """A ``FloatRange`` that also rejects ``nan`` (and, being bounded, ``inf``)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def seconds(low: float = 0.0, high: float = HOUR) -> FiniteRange:
    """A duration in seconds between ``low`` and ``high`` (inclusive)."""
    return FiniteRange(min=low, max=high)


def count(low: int = 1, high: int = MAX_U32) -> click.IntRange:
    """A whole number between ``low`` and ``high`` (inclusive)."""
    return click.IntRange(min=low, max=high)


# -- sizes (issue #29) ------------------------------------------------------------------

#: The bounds of a memory size: below 1 MiB not even a shell starts; 16 TiB is past any
#: machine a supervisor runs on.
MIN_SIZE = 1 << 20
MAX_SIZE = 1 << 44
# Most processes alive at once in one command's tree: Linux's largest pid_max.
MAX_PROCS = 4_194_304
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``512M``, ``2G``, ``1.5g``, ``300MiB``, ``1048576`` → bytes (units of 1024; a
    trailing ``B`` or ``iB`` is allowed). ``ValueError`` with one line for anything else,
    ``nan``, a negative or ``0`` included, or a size outside ``MIN_SIZE``-``MAX_SIZE``."""
    raw = text.strip().upper()
    body = raw.removesuffix("IB") if raw.endswith("IB") else raw.removesuffix("B")
    unit = body[-1:] if body[-1:] in _UNITS else ""
    number = body[: len(body) - len(unit)].strip()
    if not number.replace(".", "", 1).isdigit():  # no sign, no nan/inf, no exponent
        raise ValueError(f"invalid size {text!r}: expected a number and K, M, G or T")
    size = int(float(number) * _UNITS[unit])
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"size {text!r} is not within 1M-16T")
    return size


class Size(click.ParamType):  # type: ignore[type-arg]
    """A memory size for click (``parse_size``); the value is bytes."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
