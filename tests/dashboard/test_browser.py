"""The dashboard in a real browser: headless Debian Chromium driven by Playwright.

It checks what an operator sees: a running job whose elapsed time advances, a failure with
its stderr tail (hostile markup shown as text, never run), an action refused without the
token and carried out with it. The screenshot it takes is README's (``docs/dashboard.png``,
rewritten when ``CMDSTALK_UPDATE_SCREENSHOT=1``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.supervised import (
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
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
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
        tail = _cell(page, "finished", failing, 8)  # after the server column (hidden: one)
        assert '<script>document.title="pwned"</script>' in tail  # shown as text
        assert "\\x1b[31mred" in tail  # the escape shown, not sent to the renderer
        assert page.title() == "cmdstalk"  # neither the <script> nor the onerror ran
        assert page.locator("#finished img, #finished script").count() == 0
        _refused_then_done(page, sup, failing)
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        if os.environ.get("CMDSTALK_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(tmp_path / "dashboard.png", SCREENSHOT)


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


def _refused_then_done(page: Any, sup: Supervised, job_id: int) -> None:
    kick = page.locator(f"#finished tbody tr[data-job='{job_id}'] button", has_text="kick")
    kick.first.click()
    _wait_text(page, "#action-result", "refused (403)")
    page.fill("#token", TOKEN)
    kick = page.locator(f"#finished tbody tr[data-job='{job_id}'] button", has_text="kick")
    kick.first.click()
    _wait_text(page, "#action-result", f"kicked job {job_id}")
    # Kicked, it ran again and failed again: the page shows its second burial.
    wait_until(lambda: len(sup.state()["finished"]) == 2, timeout=30, message="the rerun")
