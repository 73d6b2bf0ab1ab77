"""`cmdstalk-spark report`'s page in a real browser: headless Chromium driven by Playwright.

The system's Chromium (Debian's ``chromium``, installed by ``.ci/run``), never a browser
Playwright downloads. The charts are inline SVG, so the checks read what the browser laid
out: where each y axis's lowest tick sits and what it says, where the bars of the time
axis start and end. Set ``CMDSTALK_REPORT_SCREENSHOT`` to a path to keep the screenshot
(docs/report.png is made that way).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cmdstalk_py.ops.eventlog import encode_line, event_record
from cmdstalk_py.supervisor.results import JobResult, Outcome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHROMIUM = "/usr/bin/chromium"
WIDTH = 1400
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip

pytestmark = [
    pytest.mark.spark,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not installed"),
]

T10 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.UTC).timestamp()


def _job(tube: str, i: int, start: float, outcome: Outcome, **kw: Any) -> JobResult:
    return JobResult(
        job_id=i, tube=tube, slot=0, outcome=outcome, started_at=start,
        ended_at=start + 0.05 + (i % 7) / 100, priority=1024, ttr=60, releases=0,
        timeouts=0, reserves=1, age_s=i % 30, payload_bytes=10, **kw,
    )  # fmt: skip


def write_log(path: Path) -> None:
    """Three busy hours of ``images`` with failures and cost figures, and a 20-minute
    ``mail/$x$`` log without figures (as before event log schema 4)."""
    jobs = []
    for i in range(3 * 600):
        fail = i % 10 == 0
        outcome = Outcome.BURIED if fail else Outcome.DELETED
        extra: dict[str, Any] = {"exit_code": 2 + i % 3} if fail else {"exit_code": 0}
        extra.update(peak_memory_bytes=(40 + i % 500) << 20, cpu_s=i % 97 / 10, procs=3)
        jobs.append(_job("images", i, T10 + i * 6, outcome, **extra))
    for i in range(200):
        kw: dict[str, Any] = {"signal": 9} if i % 25 == 0 else {"exit_code": 0}
        outcome = Outcome.TIMEOUT_BURIED if "signal" in kw else Outcome.DELETED
        jobs.append(_job("mail/$x$", 10_000 + i, T10 + 600 + i * 6, outcome, **kw))
    path.write_bytes(b"".join(encode_line(event_record(r, "h", 1)) for r in jobs))


# For each chart (svg), for each axes: its frame, the y ticks (label, y on screen) and the
# horizontal extent of the patches drawn before its axis groups (the bars, if any).
AXES_JS = """
() => [...document.querySelectorAll("figure.chart svg")].map(svg =>
  [...svg.querySelectorAll("g[id^='axes_']")].map(ax => {
    const kids = [...ax.children];
    const frame = kids[0].getBoundingClientRect();
    const firstAxis = kids.findIndex(k => k.id.startsWith("matplotlib.axis_"));
    const bars = kids.slice(1, firstAxis).filter(k => k.id.startsWith("patch_"))
      .map(k => k.getBoundingClientRect()).map(r => [r.left, r.right]);
    const yaxis = kids.filter(k => k.id.startsWith("matplotlib.axis_"))[1];
    const ticks = [...yaxis.querySelectorAll("g[id^='ytick_']")].map(t => [
      t.querySelector("text").textContent, t.querySelector("use").getBoundingClientRect().y]);
    return {left: frame.left, right: frame.right, bottom: frame.bottom, bars, ticks,
            title: svg.querySelector("g[id^='text_'] text") !== null};
  }))
"""


def check_axes(charts: list[list[dict[str, Any]]]) -> None:
    assert len(charts) == 2, charts
    for axes in charts:
        assert len(axes) == 3, axes  # throughput, outcomes, latency
        for ax in axes:
            label, y = max(ax["ticks"], key=lambda tick: tick[1])  # lowest on screen
            assert float(label) == 0 and abs(y - ax["bottom"]) < 1.5, (label, y, ax)
            assert ax["right"] <= WIDTH, ax
        bars = axes[1]["bars"]
        assert bars, axes[1]
        left, right = min(b[0] for b in bars), max(b[1] for b in bars)
        width = axes[1]["right"] - axes[1]["left"]
        # The time axis spans the windows shown: bars start at its left end and reach
        # at least 90 % of its width (a window's bar is 90 % of it), never past it.
        assert abs(left - axes[1]["left"]) < 2, (left, axes[1])
        assert axes[1]["left"] + 0.85 * width <= right <= axes[1]["right"] + 1, (right, axes[1])


def check_top_failures(page: Any) -> None:
    cell = page.locator("td", has_text="exit 2 ×").first
    assert cell.is_visible()
    box = cell.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, box
    header = page.locator("th", has_text="top failures").first
    assert header.is_visible()
    assert page.locator("td", has_text="SIGKILL ×").first.is_visible()


def check_costs(page: Any) -> None:
    """The cost tables (per tube, and the costliest jobs under a tube's charts) are shown,
    inside the window."""
    for header in ("mem p95 MiB", "peak MiB"):
        cell = page.locator("th", has_text=header).first
        assert cell.is_visible(), header
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDTH, (header, box)
    assert page.locator("td", has_text="539.0").first.is_visible()  # the highest peak, MiB


def test_report_page_in_chromium(spark: SparkSession, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    from cmdstalk_py.spark.report import build_report, parse_window

    write_log(tmp_path / "events.jsonl")
    out = tmp_path / "out"
    files = build_report(spark, str(tmp_path / "events.jsonl"), out, parse_window("1h"))
    shot = tmp_path / "report.png"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.goto(files.html.as_uri())
            scroll, client = page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert scroll <= client <= WIDTH, (scroll, client)  # no horizontal scrolling
            check_axes(page.evaluate(AXES_JS))
            check_top_failures(page)
            check_costs(page)
            titles = page.locator("figure.chart svg").first.locator("text")
            assert titles.filter(has_text="tube images:").count() == 1
            assert page.locator("figure.chart svg text", has_text="tube mail/$x$:").count() == 1
            page.set_viewport_size({"width": WIDTH, "height": 1300})  # the first chart whole
            page.screenshot(path=str(shot))
        finally:
            browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("CMDSTALK_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
