"""The report's window length: parsed from ``--window``, or chosen from the log's span.

A fixed default suits one log and not the next: at one hour, a 14-second drain is one bar
and a month is 720. Without ``--window`` the report takes the shortest of ``STEPS`` that
cuts the span (first start to last end) into at most ``MAX_WINDOWS`` windows (one more
where the span straddles a boundary: windows start at multiples of their length). No Spark
here: ``--window`` is checked before Spark starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"s": (1, "seconds"), "m": (60, "minutes"), "h": (3600, "hours"), "d": (86400, "days")}
#: The lengths the report chooses from, shortest first.
STEPS = (
    "1s", "2s", "5s", "10s", "15s", "30s",
    "1m", "2m", "5m", "10m", "15m", "30m",
    "1h", "2h", "3h", "6h", "12h",
    "1d", "2d", "7d", "14d", "30d",
)  # fmt: skip
#: At most this many windows when the report chooses (fewer than STEPS allow for a
#: span longer than 60 × 30 days).
MAX_WINDOWS = 60


@dataclass(frozen=True)
class WindowSize:
    """A report window: its length in seconds, as a Spark interval string, and as given."""

    seconds: int
    interval: str
    label: str


def parse_window(text: str) -> WindowSize:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"1d"`` → WindowSize; ValueError otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text.lower())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"bad window {text!r}: use a positive number and s/m/h/d, e.g. 1h")
    n, unit = int(match.group(1)), match.group(2)
    factor, name = _UNITS[unit]
    return WindowSize(n * factor, f"{n} {name}", f"{n}{unit}")


def window_for_span(span_seconds: float) -> WindowSize:
    """The shortest of ``STEPS`` giving at most ``MAX_WINDOWS`` windows over the span."""
    for step in STEPS:
        size = parse_window(step)
        if span_seconds <= size.seconds * MAX_WINDOWS:
            return size
    return parse_window(STEPS[-1])
