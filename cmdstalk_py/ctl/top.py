"""``cmdstalk-ctl top``: every tube's jobs by state and its rates, refreshed in place.

Rates come from two samples of ``stats-tube``: puts (``total-jobs``) and deletes
(``cmd-delete``) per second over the interval. On a terminal each frame replaces the last;
elsewhere (a pipe, a test) frames follow one another, and ``--json`` prints one per line.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from cmdstalk_py.ctl.servers import Target, read_each, report_unreachable, tube_stats
from cmdstalk_py.ctl.text import echo_json, echo_lines, safe, table

COLUMNS = {
    "current-jobs-ready": "READY",
    "current-jobs-reserved": "RESERVED",
    "current-jobs-delayed": "DELAYED",
    "current-jobs-buried": "BURIED",
    "current-waiting": "WAITING",
}
RATES = {"total-jobs": "PUT/S", "cmd-delete": "DEL/S"}
CLEAR = "\x1b[H\x1b[2J"

Sample = dict[tuple[str, str], dict[str, Any]]


def sample(target: Target) -> tuple[Sample, list[str]]:
    """stats-tube of every tube of every server, keyed (address, tube); and the failures."""
    per_server, errors = read_each(target, tube_stats)
    found: Sample = {}
    for address, per_tube in per_server.items():
        for tube, stats in per_tube.items():
            found[(address, tube)] = stats
    return found, errors


def rates(now: Sample, before: Sample | None, seconds: float) -> dict[tuple[str, str], list[str]]:
    """Per (address, tube), each of ``RATES`` per second ("-" on the first frame)."""
    out = {}
    for key, stats in now.items():
        old = before.get(key) if before else None
        if old is None or seconds <= 0:
            out[key] = ["-"] * len(RATES)
        else:
            out[key] = [f"{max(0, stats[f] - old[f]) / seconds:.1f}" for f in RATES]
    return out


def frame(target: Target, now: Sample, per_second: dict[tuple[str, str], list[str]],
          errors: list[str]) -> list[str]:  # fmt: skip
    """One screen: a clock line, the table, then unreachable servers."""
    several = len(target.addresses) > 1
    heads = [*(["SERVER"] if several else []), "TUBE", *COLUMNS.values(), *RATES.values()]
    rows: list[list[object]] = []
    for (address, tube), stats in sorted(now.items()):
        where: list[object] = [address] if several else []
        rows.append([*where, tube, *(stats[k] for k in COLUMNS), *per_second[(address, tube)]])
    clock = time.strftime("%H:%M:%S")
    head = f"cmdstalk-ctl top  {clock}  {', '.join(target.addresses)}"
    return [safe(head), *table(heads, rows, flex=1 if several else 0),
            *(f"DOWN {safe(e)}" for e in errors)]  # fmt: skip


def frame_json(now: Sample, per_second: dict[tuple[str, str], list[str]],
               errors: list[str]) -> dict[str, Any]:  # fmt: skip
    """One frame for ``--json``: every tube's stats, its rates (null on the first frame)."""
    tubes = []
    for (address, tube), stats in sorted(now.items()):
        values = [None if r == "-" else float(r) for r in per_second[(address, tube)]]
        tubes.append({"address": address, **stats, "rates": dict(zip(RATES, values, strict=True))})
    return {"time": time.time(), "errors": errors, "tubes": tubes}


@click.command()
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between refreshes.")  # fmt: skip
@click.option("--iterations", "-n", type=click.IntRange(1), help="Stop after N frames.")
@click.option("--once", is_flag=True, help="One frame (rates need two: they show -).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per frame.")
@click.pass_obj
def top(target: Target, interval: float, iterations: int | None, once: bool,
        as_json: bool) -> None:  # fmt: skip
    """Live view of every tube: jobs by state, puts and deletes per second."""
    limit = 1 if once else iterations
    in_place = sys.stdout.isatty() and not as_json
    before: Sample | None = None
    taken = 0.0
    count = 0
    errors: list[str] = []
    try:
        while limit is None or count < limit:
            now, errors = sample(target)
            when = time.monotonic()
            per_second = rates(now, before, when - taken)
            count += 1
            if as_json:
                echo_json(frame_json(now, per_second, errors))
            else:
                lines = frame(target, now, per_second, errors)
                click.echo(CLEAR if in_place else ("" if count == 1 else "\n"), nl=False)
                echo_lines(lines)
            before, taken = now, when
            if limit is None or count < limit:
                time.sleep(interval)  # an operator's refresh period: nothing to wait for
    except KeyboardInterrupt:
        return
    report_unreachable(errors)
