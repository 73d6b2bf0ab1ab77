"""The dashboard of a real ``cmdstalk --http``: what ``/api`` tells, who may act, what it
costs the server when nobody looks, and that a supervisor without it never loads it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ctl.run import ctl, out
from tests.dashboard.supervised import CMDSTALK, TOKEN, base_env, get, post, supervised
from tests.helpers import BeanstalkServer, beanstalkd_path, start_server_process, wait_until


def test_running_jobs_failures_and_actions(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    producer = beanstalk.client(use="work")
    with supervised(beanstalk, tmp_path) as sup:
        slow = producer.put(b"slow", ttr=120)
        job = wait_until(lambda: [j for j in sup.running() if j["job_id"] == slow], timeout=30,
                         message="the running job")[0]  # fmt: skip
        assert (job["pool"], job["tube"], job["ttr"]) == ("default", "work", 120)
        assert job["pid"] > 0
        wait_until(lambda: sup.running()[0]["elapsed"] > job["elapsed"] + 0.5, timeout=30,
                   message="elapsed time advancing")  # fmt: skip
        assert any(line.startswith("tick") for line in sup.running()[0]["output"])
        failing = producer.put(b"fail")
        failed = wait_until(lambda: sup.state()["finished"], timeout=30, message="a failure")
        assert failed[0]["job_id"] == failing and failed[0]["outcome"] == "buried"
        assert failed[0]["exit_code"] == 3 and failed[0]["failed"]
        assert "\x1b[31mred" in failed[0]["stderr_tail"][0]  # kept as data; the page escapes
        assert failed[0]["stderr_tail"][1].startswith("no such user <script>")

        kick = sup.url + "api/actions/kick"
        assert post(kick, {"job_id": failing}, None)[0] == 403
        assert post(kick, {"job_id": failing}, "wrong")[0] == 403
        assert get(kick)[0] == 405  # never by GET
        assert get(sup.url + "api/running", host="evil.example:80")[0] == 403  # DNS rebinding
        status, reply = post(kick, {"job_id": failing}, TOKEN)
        assert (status, reply["message"]) == (200, f"kicked job {failing}")
        # Kicked, it runs again, fails again: buried again, reported a second time.
        wait_until(lambda: len(sup.state()["finished"]) == 2, timeout=30, message="the rerun")
        other = beanstalk.client(use="elsewhere").put(b"not ours")
        assert post(sup.url + "api/actions/delete", {"job_id": other}, TOKEN)[0] == 403
        assert post(sup.url + "api/actions/delete", {"job_id": failing}, TOKEN)[0] == 200
        assert post(sup.url + "api/actions/pause", {"tube": "work", "seconds": 5}, TOKEN)[0] == 200
        tubes = wait_until(lambda: get(sup.url + "api/tubes")[1]["tubes"], timeout=10,
                           message="the tube's stats")  # fmt: skip
        assert tubes[0]["tube"] == "work"
        wait_until(lambda: get(sup.url + "api/tubes")[1]["tubes"][0]["paused"] > 0, timeout=10,
                   message="the pause, in a sample taken after it")  # fmt: skip

        workers = ctl(None, "workers", "--from", sup.url)
        assert workers.returncode == 0 and f" {slow} " in out(workers)

        status, reply = post(sup.url + "api/actions/drain", {}, TOKEN)
        assert status == 200 and "draining" in reply["message"]
        assert sup.proc.wait(timeout=60) == 0  # drained: the slow job killed after 1 s


def test_no_token_no_actions(real_beanstalkd: BeanstalkServer, tmp_path: Path) -> None:
    with supervised(real_beanstalkd, tmp_path, None) as sup:
        status, reply = post(sup.url + "api/actions/drain", {}, TOKEN)
        assert status == 403 and "--http-token" in reply["error"]
        assert sup.state()["supervisor"]["actions"] is False
        assert sup.proc.poll() is None


def test_queue_stats_only_while_someone_looks(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    stats = real_beanstalkd.client()
    with supervised(real_beanstalkd, tmp_path) as sup:
        before = stats.stats()["cmd-stats-tube"]
        time.sleep(2)  # a page closed: over this window, nothing may ask the server
        assert stats.stats()["cmd-stats-tube"] == before
        get(sup.url + "api/tubes")
        assert stats.stats()["cmd-stats-tube"] == before + 1
        get(sup.url + "api/tubes")  # within a second: the same sample serves both
        assert stats.stats()["cmd-stats-tube"] == before + 1


def test_page_and_assets_come_from_the_package(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    with supervised(real_beanstalkd, tmp_path) as sup:
        page = get(sup.url)[1]
        assert '<script src="/static/app.js"' in page and "://" not in page  # nothing remote
        assert "textContent" in get(sup.url + "static/app.js")[1]
        assert "innerHTML" not in get(sup.url + "static/app.js")[1]
        if _has_prometheus():
            assert "cmdstalk_brokers_busy" in get(sup.url + "metrics")[1]


def _has_prometheus() -> bool:
    import importlib.util

    return importlib.util.find_spec("prometheus_client") is not None


def test_bad_http_address_is_a_usage_error(real_beanstalkd: BeanstalkServer) -> None:
    result = subprocess.run(
        [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "work", "--cmd", "true",
         "--http", "nonsense"], env=base_env(), capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and b"--http" in result.stderr


def test_a_supervisor_without_http_never_loads_the_dashboard() -> None:
    probe = (
        "import sys, cmdstalk_py.supervisor.cli, cmdstalk_py.supervisor.wiring\n"
        "print(sorted(m for m in sys.modules if 'dashboard' in m or m == 'http.server'))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)  # fmt: skip
    assert result.stdout.strip() == "[]"


def test_a_server_outage_shows_on_the_page(tmp_path: Path) -> None:
    binary = beanstalkd_path()
    if binary is None:
        pytest.skip("no beanstalkd")
    process = start_server_process(lambda p: [binary, "-l", "127.0.0.1", "-p", str(p)])
    server = BeanstalkServer("beanstalkd", "127.0.0.1", process.port)
    try:
        with supervised(server, tmp_path) as sup:
            assert get(sup.url + "api/tubes")[1]["up"] is True
            process.stop()

            def down() -> bool:
                state = sup.state()
                brokers = [c for c in state["connections"] if c["where"] != "dashboard"]
                return state["queue"]["up"] is False and not any(c["connected"] for c in brokers)

            wait_until(down, timeout=30, message="the outage on the dashboard")
            assert sup.state()["queue"]["error"]  # the reason, shown beside the queue table
    finally:
        process.stop()
