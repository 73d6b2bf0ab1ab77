"""Figures, targets and the printed table of benchmarks/server.py."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from server_measure import Sample

REAL, BUNDLED = "beanstalkd", "bundled"
THROUGHPUT_TARGET = 0.67
MEMORY_TARGET = 2.0
LATENCY_TARGET = 2.0
#: The server's CPU per command, bundled/real: the throughput target's bar in CPU terms.
CPU_TARGET = 1 / THROUGHPUT_TARGET
# Below this demand the real server was idle part of the time: the load generator, not the
# server, may have set its figure.
SATURATED = 0.90


class Goal(enum.Enum):
    """How a figure is judged."""

    THROUGHPUT = "throughput"  # higher is better; ratio bundled/real >= THROUGHPUT_TARGET
    MEMORY = "memory"  # lower is better; ratio bundled/real <= MEMORY_TARGET
    LIMIT = "limit"  # lower is better; bundled's own value < Figure.limit (seconds),
    # a limit measured in the same run (start-up: a multiple of ``python -c pass``)
    LATENCY = "latency"  # lower is better (seconds); ratio bundled/real <= LATENCY_TARGET
    CPU = "cpu"  # lower is better (µs per command); ratio bundled/real <= CPU_TARGET


@dataclass
class Figure:
    """One row of the table: a metric measured on each server kind."""

    key: str
    label: str
    unit: str
    goal: Goal
    values: dict[str, float] = field(default_factory=dict)
    samples: dict[str, Sample] = field(default_factory=dict)  # the throughput sample shown
    details: dict[str, object] = field(default_factory=dict)  # everything, for --json
    # One client with one request at a time: neither side can be saturated, by design.
    latency_bound: bool = False
    limit: float = 0.0  # for Goal.LIMIT, in seconds
    # Durable figures wait on fsync, so a server below 100 % busy is expected there.
    check_saturation: bool = True

    @property
    def ratio(self) -> float | None:
        if REAL in self.values and BUNDLED in self.values and self.values[REAL]:
            return self.values[BUNDLED] / self.values[REAL]
        return None

    @property
    def cpu_ratio(self) -> float | None:
        """Ratio of operations per server CPU-second, bundled/real.

        A cross-check for a shared machine: when other processes take CPU from the servers,
        throughput swings with them, but the CPU each server spends per operation moves much
        less. On a dedicated core this is what the throughput ratio tends to.
        """
        real, bundled = self.samples.get(REAL), self.samples.get(BUNDLED)
        if real is None or bundled is None or not real.server_cpu or not bundled.server_cpu:
            return None
        return (bundled.value / bundled.server_cpu) / (real.value / real.server_cpu)

    @property
    def target(self) -> str:
        return {
            Goal.THROUGHPUT: f"ratio >= {THROUGHPUT_TARGET}",
            Goal.MEMORY: f"ratio <= {MEMORY_TARGET:g}",
            Goal.LIMIT: f"bundled < {_fmt_seconds(self.limit, self.unit, 0)} {self.unit}",
            Goal.LATENCY: f"ratio <= {LATENCY_TARGET:g}",
            Goal.CPU: f"ratio <= {CPU_TARGET:.1f}",
        }[self.goal]

    @property
    def passed(self) -> bool | None:
        """True/False against the target; None when this run cannot tell."""
        if self.goal is Goal.LIMIT:
            value = self.values.get(BUNDLED)
            return None if value is None else value < self.limit
        ratio = self.ratio
        if ratio is None:
            return None
        if self.goal is Goal.THROUGHPUT:
            return ratio >= THROUGHPUT_TARGET
        if self.goal is Goal.LATENCY:
            return ratio <= LATENCY_TARGET
        if self.goal is Goal.CPU:
            return ratio <= CPU_TARGET
        return ratio <= MEMORY_TARGET

    def real_unsaturated(self) -> bool:
        """The real server's figure may be limited by the load generator."""
        sample = self.samples.get(REAL)
        return (
            self.goal is Goal.THROUGHPUT
            and not self.latency_bound
            and self.check_saturation
            and sample is not None
            and sample.server_demand < SATURATED
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key, "label": self.label, "unit": self.unit, "target": self.target,
            "values": self.values, "ratio": self.ratio, "cpu_ratio": self.cpu_ratio,
            "pass": self.passed,
            "details": self.details,
        }


def _fmt_seconds(value: float, unit: str, digits: int = 2) -> str:
    return f"{value * 1000:.{max(digits - 1, 0)}f}" if unit == "ms" else f"{value:.{digits}f}"


def _fmt_value(figure: Figure, kind: str) -> str:
    value = figure.values.get(kind)
    if value is None:
        return "-"
    if figure.goal is Goal.LIMIT or figure.goal is Goal.LATENCY:
        return _fmt_seconds(value, figure.unit)
    if figure.goal is Goal.CPU:
        return f"{value:.2f}"
    return f"{value:,.0f}"


def _fmt_cpu(figure: Figure, kind: str) -> str:
    sample = figure.samples.get(kind)
    if sample is None:
        return "-"
    return f"{sample.server_cpu:.0%}/{sample.server_demand:.0%}"


def _verdict(figure: Figure) -> str:
    passed = figure.passed
    return "n/a" if passed is None else ("PASS" if passed else "FAIL")


_COLUMNS: list[tuple[str, int, Callable[[Figure], str]]] = [
    ("metric", 32, lambda f: f.label),
    ("unit", 7, lambda f: f.unit),
    ("beanstalkd", 11, lambda f: _fmt_value(f, REAL)),
    ("bundled", 11, lambda f: _fmt_value(f, BUNDLED)),
    ("ratio", 6, lambda f: "-" if f.ratio is None else f"{f.ratio:.2f}"),
    ("target", 18, lambda f: f.target),
    ("result", 6, _verdict),
    ("ops/cpu", 7, lambda f: "-" if f.cpu_ratio is None else f"{f.cpu_ratio:.2f}"),
    ("cpu/busy real", 13, lambda f: _fmt_cpu(f, REAL)),
    ("cpu/busy bundled", 16, lambda f: _fmt_cpu(f, BUNDLED)),
]


def table(figures: list[Figure], title: str) -> str:
    """The results as a fixed-width text table with notes."""
    head = "  ".join(f"{name:<{width}}" for name, width, _ in _COLUMNS)
    lines = [title, head, "-" * len(head)]
    for figure in figures:
        cells = [f"{fn(figure):<{width}}" for _, width, fn in _COLUMNS]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    lines.append(
        "cpu/busy: the server process's CPU use / its demand (running + waiting for a CPU),"
        " as % of one core over the measured interval."
    )
    lines.append(
        "ops/cpu: operations per server CPU-second, bundled/real (a cross-check that CPU"
        " contention on a shared machine moves far less than raw throughput)."
    )
    lines.append(
        "Throughput figures are the best of the rounds; start-up is the median of its runs."
    )
    if any(f.goal is Goal.CPU for f in figures):
        lines.append(
            "CPU per command: the server's time on a CPU (schedstat) per protocol command,"
            " over every round of each throughput workload; the geometric mean of the"
            " workloads."
        )
    if any(f.goal is Goal.LATENCY for f in figures):
        lines.append(
            "worst wait: the slowest single request of another client (put, reserve, delete"
            " in turn, on its own connection) while one connection's pipelined burst ran."
        )
    if any(f.latency_bound for f in figures):
        lines.append(
            "A single request/response client measures round-trip latency: neither process"
            " is saturated there, by design."
        )
    for figure in figures:
        if figure.real_unsaturated():
            demand = figure.samples[REAL].server_demand
            lines.append(
                f"NOTE {figure.label}: beanstalkd was busy only {demand:.0%} of the time;"
                " its figure may be limited by the load generator (ratio may be flattering)."
            )
    return "\n".join(lines)


def failures(figures: list[Figure]) -> list[str]:
    """Labels of the figures that missed their target."""
    return [f.label for f in figures if f.passed is False]
