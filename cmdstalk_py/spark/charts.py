"""The report's charts (matplotlib, Agg: no display needed) and its HTML page.

Works on the small per-window tables collected to pandas, never on raw events. Each tube's
chart is drawn once and written twice: inline SVG in ``report.html`` (text stays text, so
it is sharp at any zoom and the page needs no other file) and ``charts/*.png`` beside it,
for pasting elsewhere.
"""

from __future__ import annotations

import html
import io
import re
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import ConciseDateFormatter
from matplotlib.figure import Figure

MAX_TABLE_ROWS = 500  # per tube in the HTML; summary.csv has them all
_RATES = ["success_rate", "release_rate", "bury_rate", "timeout_rate", "lost_rate", "shutdown_rate"]
_PERCENTILES = [("duration_p50_ms", "p50"), ("duration_p90_ms", "p90"), ("duration_p99_ms", "p99")]
_OUTCOMES = [
    ("success_rate", "deleted"),
    ("release_rate", "released"),
    ("bury_rate", "buried"),
    ("timeout_rate", "timeout"),
    ("lost_rate", "lost"),
]


def chart_name(tube: str, index: int) -> str:
    """A file name for ``tube``'s chart: tube names may hold ``/``, ``$``, ``(`` and ``;``."""
    return f"{index:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', tube)[:60]}.png"


# Legends to the right of their axes: inside, "upper left" covered the first windows' data.
_BESIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}


def _from_zero(ax: Any, values: Any) -> None:
    """The y axis from 0 to 10 % above the highest value: the top point is not drawn on
    the frame, even when every window has the same value."""
    finite = values[np.isfinite(values)]
    highest = float(finite.max()) if finite.size else 0.0
    ax.set_ylim(0, highest * 1.1 if highest > 0 else 1.0)


def tube_figure(rows: Any, tube: str) -> Figure:
    """Throughput, outcomes and duration percentiles per window over time.

    Every y axis starts at 0 (a ±5 % range around one value hides its size), and the time
    axis spans the windows shown, first start to last end, however short the log."""
    fig = Figure(figsize=(10, 8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    top, middle, bottom = fig.subplots(3, 1, sharex=True)
    start = pd.to_datetime(rows["window_start"])
    end = pd.to_datetime(rows["window_end"])
    x = start.to_numpy()
    width = (end - start).dt.total_seconds().to_numpy(dtype=float) / 86400 * 0.9
    marker = "o" if len(rows) < 50 else None
    rate = rows["jobs_per_s"].to_numpy(dtype=float)
    if len(rows):  # each step covers its window: the last one ends at the last window's end
        steps_x = np.append(x, end.max().to_numpy())
        top.plot(steps_x, np.append(rate, rate[-1]), drawstyle="steps-post", color="C0")
    top.plot(x, rate, marker=marker, linestyle="none", color="C0")
    top.set_ylabel("jobs/s")
    # parse_math off: a tube name with two "$" is a name, not a formula.
    top.set_title(f"tube {tube}: throughput, outcomes and latency per window", parse_math=False)
    jobs = rows["jobs"].to_numpy(dtype=float)
    stacked = jobs * 0
    for column, label in _OUTCOMES:
        counts = rows[column].to_numpy(dtype=float) * jobs
        middle.bar(x, counts, width=width, bottom=stacked, align="edge", label=label)
        stacked = stacked + counts
    middle.set_ylabel("jobs")
    middle.legend(**_BESIDE, fontsize="small")
    for column, label in _PERCENTILES:
        bottom.plot(x, rows[column].to_numpy(dtype=float), marker=marker, label=label)
    values = rows[[c for c, _ in _PERCENTILES]].to_numpy(dtype=float)
    positive = values[values > 0]
    if positive.size and positive.max() / positive.min() > 100:
        bottom.set_yscale("log")  # p99 often sits orders of magnitude above p50
    else:
        _from_zero(bottom, values)
    bottom.set_ylabel("duration (ms)")
    bottom.set_xlabel("window start (UTC)")
    bottom.legend(**_BESIDE)
    _from_zero(top, rows["jobs_per_s"].to_numpy(dtype=float))
    _from_zero(middle, stacked)
    for ax in (top, middle, bottom):
        ax.grid(alpha=0.3)
    if len(rows):
        bottom.set_xlim(start.min().to_numpy(), end.max().to_numpy())
    formatter = ConciseDateFormatter(bottom.xaxis.get_major_locator())  # type: ignore[no-untyped-call]
    bottom.xaxis.set_major_formatter(formatter)
    return fig


def tube_chart(rows: Any, tube: str, path: Path) -> str:
    """:func:`tube_figure` as a PNG file at ``path``; the same figure as an SVG element."""
    fig = tube_figure(rows, tube)
    fig.savefig(path, format="png")
    svg = io.StringIO()
    # fonttype none: labels stay <text> the browser draws (and a reader can select).
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(svg, format="svg")
    text = svg.getvalue()
    # The element alone: the XML declaration and doctype do not belong inside HTML.
    return text[text.index("<svg") :]


# The HTML tables: the columns a reader scans, short headers, top failures early and
# wrapped, so a table fits a 1,400 px window; summary.csv and tubes.csv have everything.
_SHOWN = {
    "tube": "tube",
    "window_start": "window start",
    "first_start": "first start",
    "last_end": "last end",
    "jobs": "jobs",
    "jobs_per_s": "jobs/s",
    "success_rate": "deleted",
    "release_rate": "released",
    "bury_rate": "buried",
    "timeout_rate": "timeout",
    "lost_rate": "lost",
    "top_failures": "top failures",
    "duration_p50_ms": "p50 ms",
    "duration_p90_ms": "p90 ms",
    "duration_p99_ms": "p99 ms",
    "age_max_s": "max age s",
}


def _display(df: Any) -> Any:
    shown = df[[c for c in _SHOWN if c in df.columns]].copy()
    for column in shown.columns:
        if column in _RATES:
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.1%}")
        elif column.endswith(("_ms", "_s")):
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:,.1f}")
        elif column in ("window_start", "first_start", "last_end"):
            shown[column] = pd.to_datetime(shown[column]).dt.strftime("%Y-%m-%d %H:%M:%S")
    for column in shown.columns:
        shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else html.escape(str(v)))
    if "top_failures" in shown.columns:
        # One failure per line: the column stays narrow however many kinds there are.
        shown["top_failures"] = shown["top_failures"].str.replace(", ", "<br>", regex=False)
    return shown.rename(columns=_SHOWN)


def _table(df: Any) -> str:
    # Every cell was escaped by _display (the <br> in top failures is ours).
    return str(_display(df).to_html(index=False, escape=False, na_rep="", border=0))


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
td:nth-child(1), th:nth-child(1) { text-align: left; }
th { background: #f3f3f3; }
figure.chart { margin: 1em 0; }
svg { max-width: 100%; height: auto; border: 1px solid #eee; display: block; }
.note { color: #555; }
"""


# What jobs cost: memory in MiB, CPU to the millisecond the event log keeps.
_COSTS = {
    "memory_jobs": "jobs (mem)",
    "memory_p50_bytes": "mem p50 MiB",
    "memory_p95_bytes": "mem p95 MiB",
    "memory_max_bytes": "mem max MiB",
    "cpu_jobs": "jobs (cpu)",
    "cpu_p50_s": "cpu p50 s",
    "cpu_p95_s": "cpu p95 s",
    "cpu_max_s": "cpu max s",
}
_COSTLIEST = {
    "by": "by",
    "rank": "#",
    "job_id": "job",
    "outcome": "outcome",
    "peak_memory_bytes": "peak MiB",
    "cpu_s": "cpu s",
    "procs": "procs",
    "start": "start",
    "hostname": "host",
    "server": "server",
}


def _cost_cell(column: str, value: Any) -> str:
    if pd.isna(value):
        return ""
    if column.endswith("bytes"):
        return f"{value / (1 << 20):,.1f}"
    if column.endswith("_s"):
        return f"{value:,.3f}"
    if column == "start":
        return str(pd.Timestamp(value).strftime("%Y-%m-%d %H:%M:%S"))
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a count in a column that also holds nulls is a float in pandas
    return html.escape(str(value))


def _cost_table(df: Any, headers: dict[str, str]) -> str:
    shown = pd.DataFrame({c: [_cost_cell(c, v) for v in df[c]] for c in headers if c in df})
    return str(shown.rename(columns=headers).to_html(index=False, escape=False, border=0))


def _resources(totals: Any) -> list[str]:
    """The page's "What jobs cost" section: the cost figures per tube (or why there are
    none)."""
    if "memory_jobs" not in totals.columns:
        return []
    parts = ["<h2>What jobs cost</h2>"]
    if not (totals["memory_jobs"].sum() or totals["cpu_jobs"].sum()):
        parts.append(
            '<p class="note">No job in these logs has figures of peak memory or CPU: '
            "records written before event log schema 4 do not carry them.</p>"
        )
        return parts
    return [*parts, _cost_table(totals, {"tube": "tube", **_COSTS})]


def _tube_costliest(costliest: Any, tube: object) -> list[str]:
    if costliest is None:
        return []
    rows = costliest[costliest["tube"] == tube]
    if not len(rows):
        return []
    return ["<h3>Jobs that cost most</h3>", _cost_table(rows, _COSTLIEST)]


def write_html(
    out_dir: Path,
    windows: Any,
    totals: Any,
    title: str,
    notes: list[str],
    costliest: Any = None,
) -> Path:
    """Write ``report.html`` and ``charts/*.png`` under ``out_dir``; the page's path.

    ``costliest`` (``report.costliest``'s rows) adds each tube's most costly jobs."""
    charts = out_dir / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *(f'<p class="note">{html.escape(n)}</p>' for n in notes),
        "<h2>Tubes</h2>",
        _table(totals),
        *_resources(totals),
    ]
    for index, tube in enumerate(totals["tube"]):
        rows = windows[windows["tube"] == tube]
        name = chart_name(str(tube), index)
        svg = tube_chart(rows, str(tube), charts / name)
        parts.append(f"<h2>Tube {html.escape(str(tube))}</h2>")
        parts.append(f'<figure class="chart">{svg}')
        parts.append(
            f'<figcaption class="note">Also as <a href="charts/{html.escape(name)}">'
            f"charts/{html.escape(name)}</a>.</figcaption></figure>"
        )
        if len(rows) > MAX_TABLE_ROWS:
            parts.append(
                f'<p class="note">Last {MAX_TABLE_ROWS} of {len(rows)} windows; '
                "all are in summary.csv.</p>"
            )
        parts.append(_table(rows.tail(MAX_TABLE_ROWS).drop(columns=["tube"])))
        parts += _tube_costliest(costliest, tube)
    parts.append("</body></html>")
    page = out_dir / "report.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page
