"""The report's PNG charts (matplotlib, Agg: no display needed) and its HTML page.

Works on the small per-window tables collected to pandas, never on raw events.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_TABLE_ROWS = 500  # per tube in the HTML; summary.csv has them all
_RATES = ["success_rate", "release_rate", "bury_rate", "timeout_rate", "lost_rate", "shutdown_rate"]
_PERCENTILES = [("duration_p50_ms", "p50"), ("duration_p90_ms", "p90"), ("duration_p99_ms", "p99")]


def chart_name(tube: str, index: int) -> str:
    """A file name for ``tube``'s chart: tube names may hold ``/``, ``$``, ``(`` and ``;``."""
    return f"{index:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', tube)[:60]}.png"


def tube_chart(rows: Any, tube: str, path: Path) -> None:
    """Throughput (jobs/s) and duration p50/p90/p99 per window over time, as one PNG."""
    fig = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = pd.to_datetime(rows["window_start"]).to_numpy()
    marker = "o" if len(rows) < 50 else None
    top.plot(x, rows["jobs_per_s"].to_numpy(dtype=float), marker=marker, drawstyle="steps-post")
    top.set_ylabel("jobs/s")
    top.set_title(f"tube {tube}: throughput and latency per window")
    top.grid(alpha=0.3)
    for column, label in _PERCENTILES:
        bottom.plot(x, rows[column].to_numpy(dtype=float), marker=marker, label=label)
    values = rows[[c for c, _ in _PERCENTILES]].to_numpy(dtype=float)
    positive = values[values > 0]
    if positive.size and positive.max() / positive.min() > 100:
        bottom.set_yscale("log")  # p99 often sits orders of magnitude above p50
    bottom.set_ylabel("duration (ms)")
    bottom.set_xlabel("window start (UTC)")
    bottom.legend(loc="upper left")
    bottom.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.savefig(path, format="png")


def _display(df: Any) -> Any:
    shown = df.copy()
    for column in shown.columns:
        if column in _RATES:
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.1%}")
        elif column.endswith(("_ms", "_s")) or column == "jobs_per_s":
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:,.1f}")
    return shown


def _table(df: Any) -> str:
    return str(_display(df).to_html(index=False, escape=True, na_rep="", border=0))


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #555; }
"""


def write_html(out_dir: Path, windows: Any, totals: Any, title: str, notes: list[str]) -> Path:
    """Write ``report.html`` and ``charts/*.png`` under ``out_dir``; the page's path."""
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
    ]
    for index, tube in enumerate(totals["tube"]):
        rows = windows[windows["tube"] == tube]
        name = chart_name(str(tube), index)
        tube_chart(rows, str(tube), charts / name)
        parts.append(f"<h2>Tube {html.escape(str(tube))}</h2>")
        parts.append(
            f'<img src="charts/{html.escape(name)}" alt="charts for {html.escape(str(tube))}">'
        )
        if len(rows) > MAX_TABLE_ROWS:
            parts.append(
                f'<p class="note">Last {MAX_TABLE_ROWS} of {len(rows)} windows; '
                "all are in summary.csv.</p>"
            )
        parts.append(_table(rows.tail(MAX_TABLE_ROWS).drop(columns=["tube"])))
    parts.append("</body></html>")
    page = out_dir / "report.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page
