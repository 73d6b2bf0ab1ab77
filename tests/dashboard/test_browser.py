"""The dashboard in a real browser: headless Debian Chromium driven by Playwright.

It checks what an operator sees: a running job whose elapsed time advances, what a job's
tree holds while it runs and what it cost once finished, a failure with
its stderr tail (hostile markup shown as text, never run), an action refused without the
token and carried out with it, its answer in view of the button however far down the page
it is, a kicked job's row without its buttons, a drain that asks first; and that a page of
another name made to resolve to 127.0.0.1 (DNS rebinding) reads nothing. The screenshot it
takes is README's (``docs/dashboard.png``, rewritten when ``CMDSTALK_UPDATE_SCREENSHOT=1``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.supervised import (
    HOG_MB,
    TOKEN,
    Supervised,
    server_processes,
    supervised,
    supervised_pools,
    supervised_servers,
)
from tests.dashboard.test_pools_board import POOLS
from tests.helpers import BeanstalkServer, wait_until

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
REBOUND = "127.0.0.1.rebind.example"  # resolved to 127.0.0.1, as a rebinding page's name
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"]  # fmt: skip
SCREENSHOT = Path(__file__).parents[2] / "docs" / "dashboard.png"


@pytest.fixture
def page() -> Iterator[Any]:
    """A page of the system Chromium (CI installs it: there, its absence is a failure)."""
    if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the dev extra is absent")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            yield page
        finally:
            browser.close()


def _cell(page: Any, table: str, job_id: int, column: int) -> str:
    locator = page.locator(f"#{table} tbody tr[data-job='{job_id}'] td").nth(column)
    return str(locator.text_content(timeout=30_000))


def _wait_text(page: Any, selector: str, text: str) -> None:
    page.locator(selector, has_text=text).first.wait_for(timeout=30_000)


def test_dashboard_in_chromium(
    real_beanstalkd: BeanstalkServer, tmp_path: Path, page: Any
) -> None:
    producer = real_beanstalkd.client(use="work")
    with supervised(real_beanstalkd, tmp_path) as sup:
        slow = producer.put(b"slow", ttr=120)
        page.goto(sup.url)
        first = _cell(page, "running", slow, 6)
        assert first.endswith("/ 120s TTR")
        wait_until(lambda: _cell(page, "running", slow, 6) != first, timeout=30,
                   message="the elapsed time to advance on the page")  # fmt: skip
        _wait_text(page, f"#running tbody tr[data-job='{slow}'] pre", "tick")

        failing = producer.put(b"fail")
        _wait_text(page, "#finished tbody tr.failed", "no such user")
        tail = _cell(page, "finished", failing, 11)  # after the server column (hidden: one)
        assert '<script>document.title="pwned"</script>' in tail  # shown as text
        assert "\\x1b[31mred" in tail  # the escape shown, not sent to the renderer
        assert page.title() == "cmdstalk"  # neither the <script> nor the onerror ran
        assert page.locator("#finished img, #finished script").count() == 0
        _refused_then_done(page, sup, failing)
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        if os.environ.get("CMDSTALK_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(tmp_path / "dashboard.png", SCREENSHOT)
        _drain_asks_first(page, sup)


def _mib(text: str) -> float:
    """``"61 MiB"`` → 61.0 (the page's sizes); AssertionError for anything else."""
    match = re.fullmatch(r"(\d+(?:\.\d)?) (B|KiB|MiB|GiB)", text)
    assert match, text
    scale = {"B": 1 / (1 << 20), "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[match[2]]
    return float(match[1]) * scale


def test_what_jobs_cost_on_the_page(
    real_beanstalkd: BeanstalkServer, tmp_path: Path, page: Any
) -> None:
    done = tmp_path / "done"
    producer = real_beanstalkd.client(use="work")
    with supervised(real_beanstalkd, tmp_path, None, "--max-memory", "1G") as sup:
        hog = producer.put(f"hog {done}".encode(), ttr=120)
        page.goto(sup.url)
        row = f"#running tbody tr[data-job='{hog}']"

        def live_memory() -> float:
            text = str(page.locator(f"{row} td.memory").text_content(timeout=30_000))
            return 0.0 if text == "-" else _mib(text)

        wait_until(lambda: live_memory() >= HOG_MB, timeout=30,
                   message=f"{HOG_MB} MiB live on the page")  # fmt: skip
        assert re.fullmatch(r"\d+\.\d\d s", _text(page, f"{row} td.cpu")), _text(page, row)
        assert int(_text(page, f"{row} td.procs")) >= 1
        done.touch()
        finished = f"#finished tbody tr[data-job='{hog}']"
        page.locator(finished).wait_for(timeout=30_000)
        assert _mib(_text(page, f"{finished} td.memory")) >= HOG_MB
        assert float(_text(page, f"{finished} td.cpu").removesuffix(" s")) > 0
        assert int(_text(page, f"{finished} td.procs")) >= 1
        assert page.locator("#finished thead th", has_text="peak memory").is_visible()
        page.screenshot(path=str(tmp_path / "costs.png"), full_page=True)


def _text(page: Any, selector: str) -> str:
    return str(page.locator(selector).first.text_content(timeout=30_000))


def test_a_rebound_name_reads_nothing(
    real_beanstalkd: BeanstalkServer, tmp_path: Path, page: Any
) -> None:
    with supervised(real_beanstalkd, tmp_path) as sup:
        port = sup.url.rsplit(":", 1)[1].rstrip("/")
        reply = page.goto(f"http://{REBOUND}:{port}/api/state")
        assert reply.status == 403 and "running" not in reply.text()
        assert page.goto(f"http://{REBOUND}:{port}/").status == 403
        page.goto(f"http://localhost:{port}/")  # the operator's own name for it still works
        page.locator("#state", has_text="running").wait_for(timeout=30_000)


def test_each_pool_and_limit_on_the_page(
    real_beanstalkd: BeanstalkServer, tmp_path: Path, page: Any
) -> None:
    client = real_beanstalkd.client()
    ids = {}
    with supervised_pools(real_beanstalkd, tmp_path, POOLS) as sup:
        for tube in ("alpha", "beta", "delta"):
            client.use(tube)
            ids[tube] = client.put(b"slow", ttr=120)
        page.goto(sup.url)
        cells = {t: (_cell(page, "running", i, 0), _cell(page, "running", i, 6))
                 for t, i in ids.items()}  # fmt: skip
    assert cells["alpha"][0] == "plain" and cells["alpha"][1].endswith("/ 120s TTR")
    assert cells["beta"][0] == "bounded" and cells["beta"][1].endswith("/ 90s max runtime")
    assert cells["delta"][0] == "endless" and cells["delta"][1].endswith("(no limit)")


def test_a_second_servers_row_on_the_page(tmp_path: Path, page: Any) -> None:
    with server_processes("beanstalkd", 2) as started:
        servers = [server for _, server in started]
        with supervised_servers(servers, tmp_path) as sup:
            page.goto(sup.url)
            for server in servers:
                row = f"#tubes tbody tr[data-server='{server.address}'][data-tube='work']"
                page.locator(row).wait_for(timeout=30_000)
                assert page.locator(f"{row} td.server").text_content() == server.address
            assert page.locator("#tubes th.server").is_visible()  # shown: two to tell apart
            page.screenshot(path=str(tmp_path / "servers.png"), full_page=True)


def _in_view(page: Any, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    height = page.viewport_size["height"]
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def _refused_then_done(page: Any, sup: Supervised, job_id: int) -> None:
    # A short window: the failure's row is far below the top, as on a busy supervisor.
    page.set_viewport_size({"width": 1280, "height": 300})
    kick = page.locator(f"#finished tbody tr[data-job='{job_id}'] button", has_text="kick")
    kick.first.click()  # scrolled into view first, as an operator would
    _wait_text(page, "#action-result", "refused (403)")
    assert _in_view(page, "#action-result") and _in_view(page, "#token")
    page.fill("#token", TOKEN)
    kick = page.locator(f"#finished tbody tr[data-job='{job_id}'] button", has_text="kick")
    kick.first.click()
    _wait_text(page, "#action-result", f"kicked job {job_id}")
    assert _in_view(page, "#action-result")
    # The kicked burial's row says so and offers nothing more.
    row = page.locator(f"#finished tbody tr[data-job='{job_id}']",
                       has=page.locator("td.action", has_text="kicked"))  # fmt: skip
    row.first.wait_for(timeout=30_000)
    assert row.first.locator("button").count() == 0
    # Kicked, it ran again and failed again: the page shows its second burial, which
    # offers its buttons again.
    wait_until(lambda: len(sup.state()["finished"]) == 2, timeout=30, message="the rerun")
    page.set_viewport_size({"width": 1280, "height": 860})
    again = page.locator(f"#finished tbody tr[data-job='{job_id}'] button", has_text="kick")
    again.first.wait_for(timeout=30_000)


def _next_poll(page: Any) -> None:
    before = page.text_content("#updated")
    wait_until(lambda: page.text_content("#updated") != before, timeout=30,
               message="the page's next poll")  # fmt: skip


def _drain_asks_first(page: Any, sup: Supervised) -> None:
    drains: list[str] = []
    page.on("request", lambda r: drains.append(r.url) if "/actions/drain" in r.url else None)
    page.click("#drain")
    page.locator("#drain-confirm").wait_for(state="visible", timeout=30_000)
    page.click("#drain-no")
    page.locator("#drain-confirm").wait_for(state="hidden", timeout=30_000)
    # Two of the page's polls later, still not asked to drain.
    for _ in range(2):
        _next_poll(page)
    assert drains == [] and sup.state()["supervisor"]["state"] == "running"
    page.click("#drain")
    page.click("#drain-yes")
    _wait_text(page, "#action-result", "draining")
    assert sup.proc.wait(timeout=60) == 0
