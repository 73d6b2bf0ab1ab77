"""The dashboard's pure parts, without a socket: request bytes (``wire``), ``Host`` names
(``hosts``), what it admits (``admission``), what it logs (``throttle``), what it renders
(``snapshots``)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading

import pytest

from cmdstalk_py.ops.dashboard.admission import Admission, Budget, descriptor_reserve
from cmdstalk_py.ops.dashboard.hosts import HostCheck, allowed_names, parse_host
from cmdstalk_py.ops.dashboard.offload import Offload
from cmdstalk_py.ops.dashboard.snapshots import Snapshots
from cmdstalk_py.ops.dashboard.throttle import LogThrottle
from cmdstalk_py.ops.dashboard.wire import MAX_BODY, BadRequest, Response, parse_head, render

# -- wire ------------------------------------------------------------------------------------


def test_a_request_head() -> None:
    request = parse_head(b"POST /api/actions/kick?x=1 HTTP/1.1\r\nHost: a:1\r\n"
                         b"Content-Length: 12\r\nX-Cmdstalk-Token:  t \r\n\r\n")  # fmt: skip
    assert (request.method, request.path) == ("POST", "/api/actions/kick")
    assert request.content_length() == 12
    assert request.headers["x-cmdstalk-token"] == "t" and request.keep_alive
    assert not parse_head(b"GET / HTTP/1.0\r\n\r\n").keep_alive
    assert not parse_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"\r\n\r\n", 400),
        (b"GET /\r\n\r\n", 400),
        (b"GET http://evil/ HTTP/1.1\r\n\r\n", 400),
        (b"G(T / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/3\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * 65 + b"\r\n", 431),
    ],
)
def test_a_bad_head(head: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_head(head)
    assert raised.value.status == status


@pytest.mark.parametrize(
    ("length", "status"),
    [
        ("abc", 400),
        ("-1", 400),
        ("1e3", 400),
        ("٣", 400),  # a digit to str.isdigit, not to HTTP
        (str(MAX_BODY + 1), 413),
        ("9" * 40, 413),
    ],
)
def test_a_bad_content_length(length: str, status: int) -> None:
    request = parse_head(f"POST / HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode())
    with pytest.raises(BadRequest) as raised:
        request.content_length()
    assert raised.value.status == status
    chunked = parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(BadRequest, match="Content-Length"):
        chunked.content_length()


def test_a_response() -> None:
    response = Response(404, b'{"error": "x"}', headers={"Allow": "POST"}, close=True)
    data = render(response)
    assert data.startswith(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n")
    assert b"Content-Length: 14\r\nAllow: POST\r\nConnection: close\r\n\r\n{" in data
    assert render(response, head_only=True).endswith(b"\r\n\r\n")


# -- hosts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.1", ipaddress.ip_address("127.0.0.1")),
        ("127.0.0.1:8080", ipaddress.ip_address("127.0.0.1")),
        ("[::1]:80", ipaddress.ip_address("::1")),
        ("LOCALHOST:1", "localhost"),
        ("127.0.0.1.evil.example", "127.0.0.1.evil.example"),
        ("127.1", "127.1"),  # a name, never the address it resembles
        ("[::1].x", None),
        ("::1", None),
        ("[fe80::1%eth0]", None),
        ("localhost.", None),
        ("a..b", None),
        ("host:99999999", None),
        ("", None),
    ],
)
def test_parse_host(header: str, host: object) -> None:
    assert parse_host(header) == host


def test_host_check_exactly_its_own() -> None:
    loopback = HostCheck("127.0.0.1", "127.0.0.1")
    assert loopback.allows("127.0.0.1:1") and loopback.allows("localhost")
    for header in ("127.0.0.2", "[::1]", "127.0.0.1.evil.example", "localhost.evil", None):
        assert not loopback.allows(header), header
    named = HostCheck("dash.lan", "10.0.0.5", ["ops.example, 192.0.2.1", "[2001:db8::1]"])
    for header in ("dash.lan", "10.0.0.5:80", "ops.example", "192.0.2.1", "[2001:db8::1]:1"):
        assert named.allows(header), header
    assert not named.allows("localhost") and not named.allows("10.0.0.6")
    wildcard = HostCheck("0.0.0.0", "0.0.0.0", ["box"])
    for header in ("203.0.113.9", "[2001:db8::2]", "localhost", "box:8080"):
        assert wildcard.allows(header), header  # an address literal cannot be rebound
    assert not wildcard.allows("127.0.0.1.evil.example") and not wildcard.allows("127.1")
    with pytest.raises(ValueError, match="--http-allow-host"):
        allowed_names(["good", "bad name!"])


# -- admission -------------------------------------------------------------------------------


def test_descriptor_reserve() -> None:
    assert descriptor_reserve(1024) == 256 and descriptor_reserve(65536) == 16384
    assert descriptor_reserve(256) == 128  # half, however small the limit


def test_admission_cap_and_reserve() -> None:
    open_fds = [10]
    now = [0.0]
    admission = Admission(2, lambda: 1024, lambda: open_fds[0], lambda: now[0])
    assert admission.admit(5) is None and admission.admit(6) is None
    assert admission.admit(7) == "2 connections already open"
    admission.release()
    assert admission.admit(800) is not None  # its own number proves 800 are open
    open_fds[0] = 900
    assert admission.admit(8) is None  # counted a second ago: not again yet
    admission.release()
    now[0] = 1.0
    assert "descriptors left for jobs" in str(admission.admit(8))


def test_budget_paces() -> None:
    now = [0.0]
    budget = Budget(10.0, 2, lambda: now[0])
    assert [budget.wait() for _ in range(4)] == [0.0, 0.0, pytest.approx(0.1), pytest.approx(0.2)]
    now[0] = 10.0
    assert budget.wait() == 0.0


# -- throttle --------------------------------------------------------------------------------


def test_throttle(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    throttle = LogThrottle(logging.getLogger("t"), 10.0, lambda: now[0])
    with caplog.at_level(logging.INFO, "t"):
        for _ in range(1000):
            throttle.log("bad", logging.INFO, "bad request %d", 400)
        throttle.log("other", logging.INFO, "another kind")
        now[0] = 10.0
        throttle.log("bad", logging.INFO, "bad request %d", 400)
    assert caplog.messages == ["bad request 400", "another kind",
                               "bad request 400 (and 999 more in the previous 10 s)"]  # fmt: skip


# -- snapshots -------------------------------------------------------------------------------


def test_many_clients_one_rendering() -> None:
    calls: list[int] = []
    release = threading.Event()

    def state() -> tuple[bytes, str]:
        release.wait(10)
        calls.append(1)
        return b"%d" % len(calls), "application/json"

    now = [0.0]
    offload = Offload()
    snapshots = Snapshots({"state": state}, offload, 0.5, lambda: now[0])

    async def clients() -> None:
        waiting = [asyncio.ensure_future(snapshots.get("state")) for _ in range(500)]
        await asyncio.sleep(0.05)
        release.set()
        assert {body for body, _ in await asyncio.gather(*waiting)} == {b"1"}
        assert (await snapshots.get("state"))[0] == b"1"  # still fresh
        now[0] = 0.5
        assert (await snapshots.get("state"))[0] == b"2"  # stale: rendered again
        snapshots.expire()
        assert (await snapshots.get("state"))[0] == b"3"  # an action happened

    try:
        asyncio.run(clients())
    finally:
        offload.close()
    assert len(calls) == snapshots.renderings == 3
