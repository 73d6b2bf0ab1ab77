"""The dashboard of a supervisor serving two servers (issue #18, several servers): every
server's tubes in ``/api`` (each row naming its server), each server's reachability on its
own, actions that name their server (and only one the supervisor serves), and nothing
asked of any server while nobody looks."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import greenstalk
import pytest

from tests.conftest import SERVER_KINDS
from tests.dashboard.supervised import (
    TOKEN,
    Started,
    Supervised,
    get,
    post,
    server_processes,
    supervised_pools,
    supervised_servers,
)
from tests.helpers import BeanstalkServer, beanstalkd_path, wait_until


@pytest.fixture(params=SERVER_KINDS)
def two(request: pytest.FixtureRequest) -> Iterator[Started]:
    """Two servers of each kind in turn, each its own process."""
    if request.param == "beanstalkd" and beanstalkd_path() is None:
        pytest.skip("no beanstalkd")
    with server_processes(request.param, 2) as servers:
        yield servers


def _rows(sup: Supervised) -> dict[tuple[str, str], dict[str, Any]]:
    return {(t["server"], t["tube"]): t for t in get(sup.url + "api/tubes")[1]["tubes"]}


def _finished(sup: Supervised, count: int) -> list[dict[str, Any]]:
    finished: list[dict[str, Any]] = sup.state()["finished"]
    return finished if len(finished) == count else []


def _buried(server: BeanstalkServer) -> int:
    """A job that the supervisor buries on ``server`` (its command exits 3)."""
    client = server.client(use="work")
    job_id = client.put(b"fail")
    wait_until(lambda: client.stats_job(job_id)["state"] == "buried", timeout=30,
               message=f"job {job_id} buried on {server.address}")  # fmt: skip
    return job_id


def test_every_servers_tubes_and_actions_on_the_named_one(two: Started, tmp_path: Path) -> None:
    (_, first), (_, second) = two
    a, b = first.address, second.address
    with supervised_servers([first, second], tmp_path) as sup:
        state = sup.state()
        assert state["supervisor"]["servers"] == [a, b] and state["supervisor"]["server"] == a
        rows = wait_until(lambda: _rows(sup) if len(_rows(sup)) == 2 else {}, timeout=30,
                          message="both servers' work tube")  # fmt: skip
        assert set(rows) == {(a, "work"), (b, "work")}
        queue = get(sup.url + "api/tubes")[1]
        assert queue["up"] is True and queue["error"] is None
        assert [(s["server"], s["up"]) for s in queue["servers"]] == [(a, True), (b, True)]
        # Fresh servers number their jobs alike: one id, a buried job on each.
        on_a, on_b = _buried(first), _buried(second)
        assert on_a == on_b
        finished = wait_until(lambda: _finished(sup, 2), timeout=30, message="both burials")
        assert sorted(f["server"] for f in finished) == sorted([a, b])

        kick = sup.url + "api/actions/kick"
        assert post(kick, {"job_id": on_b, "server": b}, None)[0] == 403  # still token-gated
        status, reply = post(kick, {"job_id": on_b}, TOKEN)  # which server's job?
        assert status == 400 and b in reply["error"]
        assert post(kick, {"job_id": on_b, "server": "127.0.0.1:1"}, TOKEN)[0] == 403
        assert post(kick, {"job_id": on_b, "server": "127.0.0.1:x"}, TOKEN)[0] == 400
        assert post(kick, {"job_id": on_b, "server": 11300}, TOKEN)[0] == 400
        kicks = first.client(), second.client()
        assert [c.stats_job(on_a)["kicks"] for c in kicks] == [0, 0]  # nothing touched

        status, reply = post(kick, {"job_id": on_b, "server": b}, TOKEN)
        assert (status, reply["message"]) == (200, f"kicked job {on_b} on {b}")
        assert kicks[1].stats_job(on_b)["kicks"] == 1  # there, not on the first
        assert kicks[0].stats_job(on_a)["kicks"] == 0

        pause = sup.url + "api/actions/pause"
        assert post(pause, {"tube": "work", "seconds": 30, "server": b}, TOKEN)[0] == 200
        assert kicks[1].stats_tube("work")["pause"] == 30
        assert kicks[0].stats_tube("work")["pause"] == 0
        delete = sup.url + "api/actions/delete"
        assert post(delete, {"job_id": on_a, "server": a}, TOKEN)[0] == 200
        with pytest.raises(greenstalk.NotFoundError):
            kicks[0].stats_job(on_a)
        assert kicks[1].stats_job(on_b)["state"] in {"ready", "reserved", "buried"}


def test_one_server_down_the_others_rows_stay(two: Started, tmp_path: Path) -> None:
    (_, first), (second_process, second) = two
    a, b = first.address, second.address
    with supervised_servers([first, second], tmp_path) as sup:
        wait_until(lambda: len(_rows(sup)) == 2, timeout=30, message="both servers' rows")
        second_process.stop()

        def down() -> dict[str, Any]:
            queue: dict[str, Any] = sup.state()["queue"]
            servers = {s["server"]: s for s in queue["servers"]}
            return queue if servers[b]["up"] is False else {}

        queue = wait_until(down, timeout=30, message="the second server shown unreachable")
        servers = {s["server"]: s for s in queue["servers"]}
        assert servers[a]["up"] is True and servers[a]["error"] is None
        assert servers[b]["error"]  # the reason, for that server alone
        assert queue["up"] is False and queue["error"].startswith(f"{b}: ")
        assert [(t["server"], t["tube"]) for t in queue["tubes"]] == [(a, "work")]
        dashboard = {c["server"]: c["connected"] for c in sup.state()["connections"]
                     if c["where"] == "dashboard"}  # fmt: skip
        assert dashboard == {a: True, b: False}
        # An action on the server that is down says so; the other still answers.
        status, reply = post(sup.url + "api/actions/pause",
                             {"tube": "work", "seconds": 1, "server": b}, TOKEN)  # fmt: skip
        assert status == 502 and b in reply["error"]
        assert post(sup.url + "api/actions/pause",
                    {"tube": "work", "seconds": 1, "server": a}, TOKEN)[0] == 200  # fmt: skip


def test_no_server_is_asked_while_nobody_looks(two: Started, tmp_path: Path) -> None:
    servers = [server for _, server in two]
    stats = [server.client() for server in servers]

    def counts() -> list[int]:
        return [int(c.stats()["cmd-stats-tube"]) for c in stats]

    with supervised_servers(servers, tmp_path) as sup:
        before = counts()
        time.sleep(2)  # a page closed: over this window, nothing may ask either server
        assert counts() == before
        get(sup.url + "api/tubes")
        assert counts() == [n + 1 for n in before]  # one stats-tube each, for tube work
        get(sup.url + "api/state")  # within a second: the same samples serve both
        assert counts() == [n + 1 for n in before]
        # Rates are each server's own: puts on the second alone show on its row alone.
        producer = servers[1].client(use="work")
        for _ in range(5):
            producer.put(b"")
        a, b = (server.address for server in servers)
        rows = wait_until(lambda: _rows(sup) if (_rows(sup)[(b, "work")]["puts_per_s"] or 0) > 0
                          else {}, timeout=10, message="the second server's put rate")  # fmt: skip
        assert rows[(a, "work")]["puts_per_s"] == 0


@pytest.mark.slow
def test_a_silent_server_holds_the_page_up_for_its_timeout_alone(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    # Accepts connections (the kernel's backlog) and never answers a command.
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)
    try:
        mute = BeanstalkServer("silent", "127.0.0.1", silent.getsockname()[1])
        a, b = real_beanstalkd.address, mute.address
        with supervised_servers([real_beanstalkd, mute], tmp_path) as sup:
            started = time.monotonic()
            status, queue = get(sup.url + "api/tubes")
            took = time.monotonic() - started
            assert status == 200 and took < 9  # one 5 s timeout, not one per server and tube
            servers = {s["server"]: s for s in queue["servers"]}
            assert servers[a]["up"] is True and servers[b]["up"] is False
            assert "timed out" in servers[b]["error"]
            assert [(t["server"], t["tube"]) for t in queue["tubes"]] == [(a, "work")]
    finally:
        silent.close()


def test_a_reload_that_adds_a_server_shows_it_and_lets_it_be_acted_on(
    two: Started, tmp_path: Path
) -> None:
    (_, first), (_, second) = two
    a, b = first.address, second.address
    one = '[pools.one]\ntubes = ["work"]\n'
    with supervised_pools(first, tmp_path, one) as sup:
        wait_until(lambda: set(_rows(sup)) == {(a, "work")}, timeout=30, message="a's row")
        pause = sup.url + "api/actions/pause"
        assert post(pause, {"tube": "work", "seconds": 0, "server": b}, TOKEN)[0] == 403
        config = tmp_path / "pools.toml"
        two_pools = f'{one}[pools.two]\naddress = "{b}"\ntubes = ["work"]\n'
        config.write_text(config.read_text().replace(one, two_pools))
        sup.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: set(_rows(sup)) == {(a, "work"), (b, "work")}, timeout=30,
                   message="the added server's row")  # fmt: skip
        assert sup.state()["supervisor"]["servers"] == [a, b]
        assert post(pause, {"tube": "work", "seconds": 20, "server": b}, TOKEN)[0] == 200
        assert second.client().stats_tube("work")["pause"] == 20
        # Dropped again: its row goes, and it may no longer be acted on.
        config.write_text(config.read_text().replace(two_pools, one))
        sup.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: set(_rows(sup)) == {(a, "work")}, timeout=30,
                   message="the dropped server's row gone")  # fmt: skip
        assert post(pause, {"tube": "work", "seconds": 0, "server": b}, TOKEN)[0] == 403


def test_each_server_shows_and_acts_on_the_tubes_served_there(
    two: Started, tmp_path: Path
) -> None:
    (_, first), (_, second) = two
    a, b = first.address, second.address
    # Both tubes exist on both servers (a delayed job each where this supervisor does not
    # serve them), so only the pools can tell which server shows and acts on which.
    strays = {}
    for server, tube in ((first, "other"), (second, "work")):
        strays[server.address] = server.client(use=tube).put(b"stray", delay=3600)
    pools = f'[pools.one]\ntubes = ["work"]\n[pools.two]\naddress = "{b}"\ntubes = ["other"]\n'
    with supervised_pools(first, tmp_path, pools) as sup:
        # Before: every server showed every pool's tubes.
        wait_until(lambda: set(_rows(sup)) == {(a, "work"), (b, "other")}, timeout=30,
                   message="each server's own tube")  # fmt: skip
        kick, pause = sup.url + "api/actions/kick", sup.url + "api/actions/pause"
        status, reply = post(kick, {"job_id": strays[a], "server": a}, TOKEN)
        assert status == 403 and "other" in reply["error"] and a in reply["error"]
        assert post(pause, {"tube": "other", "seconds": 30, "server": a}, TOKEN)[0] == 403
        assert post(pause, {"tube": "work", "seconds": 30, "server": b}, TOKEN)[0] == 403
        assert first.client().stats_job(strays[a])["state"] == "delayed"  # untouched
        assert first.client().stats_tube("other")["pause"] == 0
        assert second.client().stats_tube("work")["pause"] == 0
        assert post(pause, {"tube": "other", "seconds": 30, "server": b}, TOKEN)[0] == 200
        assert second.client().stats_tube("other")["pause"] == 30
