"""The dashboard's HTTP as clients meet it, on a real ``cmdstalk --http`` (issue #27): which
``Host`` it answers (DNS rebinding), what it bounds (connections, bytes, time), and that
whatever a client does reaches stderr only as the log's own lines, a few at most."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from cmdstalk_py.ops.dashboard.admission import MAX_CONNECTIONS
from cmdstalk_py.ops.dashboard.listener import REQUEST_TIMEOUT
from cmdstalk_py.ops.dashboard.wire import MAX_BODY, MAX_HEAD
from tests.dashboard.rawhttp import closed_by_peer, exchange, read_answer, request
from tests.dashboard.supervised import CMDSTALK, TOKEN, base_env, get, supervised
from tests.helpers import BeanstalkServer, wait_until

# What a rebinding page's name looks like, against a dashboard on 127.0.0.1: each refused,
# with and without a port.
REFUSED_V4 = ["127.0.0.1.evil.example", "[::1].x", "127.1", "localhost.evil", "localhost.",
              "evil.example", "0x7f.0.0.1", "2130706433", "127.0.0.01", "[::1]",
              "[::ffff:127.0.0.1]"]  # fmt: skip
MALFORMED = ["", "::1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:80:80", "[::1", "[::1]x",
             "127.0.0.1 evil", "local_host\x00"]  # fmt: skip
ALLOWED_V4 = ["127.0.0.1", "localhost", "LocalHost"]
REFUSED_V6 = ["[::1].x", "127.0.0.1", "[::2]", "[::1%lo]", "[::1]].x", "localhost.evil"]
ALLOWED_V6 = ["[::1]", "[0:0:0:0:0:0:0:1]", "localhost"]


def _status(port: int, host: str | None, bound: str = "127.0.0.1") -> int:
    answer = exchange((bound, port), request("GET", "/api/running", host))
    assert answer is not None
    return answer.status


def _with_ports(hosts: list[str], port: int) -> list[str]:
    return hosts + [f"{h}:{p}" for h in hosts for p in (80, port)]


def test_only_its_own_names_are_answered(real_beanstalkd: BeanstalkServer, tmp_path: Path) -> None:
    with supervised(real_beanstalkd, tmp_path) as sup:
        statuses = {h: _status(sup.port, h) for h in _with_ports(REFUSED_V4, sup.port)}
        statuses |= {h: _status(sup.port, h) for h in MALFORMED}
        assert {h for h, s in statuses.items() if s != 403} == set()
        assert _status(sup.port, None) == 403  # no Host at all
        for host in _with_ports(ALLOWED_V4, sup.port):
            assert _status(sup.port, host) == 200, host
        # Refused before anything else: an action of a rebound page never runs.
        drain = request("POST", "/api/actions/drain", "127.0.0.1.evil.example",
                        f"X-Cmdstalk-Token: {TOKEN}\r\nContent-Length: 0\r\n")  # fmt: skip
        answer = exchange(("127.0.0.1", sup.port), drain)
        assert answer is not None and answer.status == 403 and sup.proc.poll() is None


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_names(real_beanstalkd: BeanstalkServer, tmp_path: Path) -> None:
    with supervised(real_beanstalkd, tmp_path, http_host="::1") as sup:
        for host in _with_ports(REFUSED_V6, sup.port) + MALFORMED:
            assert _status(sup.port, host, "::1") == 403, host
        for host in _with_ports(ALLOWED_V6, sup.port):
            assert _status(sup.port, host, "::1") == 200, host


def test_names_the_operator_allows(real_beanstalkd: BeanstalkServer, tmp_path: Path) -> None:
    allow = ("--http-allow-host", "dash.example", "--http-allow-host", "ops.example,10.1.2.3")
    with supervised(real_beanstalkd, tmp_path, TOKEN, *allow) as sup:
        for host in ("dash.example", "DASH.example:8080", "ops.example", "10.1.2.3:80"):
            assert _status(sup.port, host) == 200, host
        for host in ("dash.example.evil", "evil.dash.example", "10.1.2.4", "127.0.0.1.evil"):
            assert _status(sup.port, host) == 403, host
    bad = subprocess.run(
        [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "work", "--cmd", "true",
         "--http", "127.0.0.1:0", "--http-allow-host", "bad name!"],
        env=base_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--http-allow-host" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_connections_over_the_cap_are_closed_at_once(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    with supervised(real_beanstalkd, tmp_path) as sup:
        held = [socket.create_connection(("127.0.0.1", sup.port), timeout=30)
                for _ in range(MAX_CONNECTIONS)]  # fmt: skip
        try:

            def refused() -> bool:  # once the dashboard holds every one of them
                answer = exchange(("127.0.0.1", sup.port), request("GET", "/", "127.0.0.1"))
                return answer is not None and answer.status == 503

            wait_until(refused, timeout=30, message="a connection over the cap refused")
            held.pop().close()
            wait_until(lambda: get(sup.url + "api/running")[0] == 200, timeout=30,
                       message="a freed slot served")  # fmt: skip
        finally:
            for sock in held:
                sock.close()


def test_what_a_request_may_be(real_beanstalkd: BeanstalkServer, tmp_path: Path) -> None:
    with supervised(real_beanstalkd, tmp_path) as sup:
        address = ("127.0.0.1", sup.port)
        cases = {
            431: request("GET", "/", "127.0.0.1", f"X-Pad: {'a' * MAX_HEAD}\r\n"),
            413: request("POST", "/api/actions/drain", "127.0.0.1",
                         f"Content-Length: {MAX_BODY + 1}\r\n"),
            411: request("POST", "/api/actions/drain", "127.0.0.1",
                         "Transfer-Encoding: chunked\r\n"),
            400: request("POST", "/api/actions/drain", "127.0.0.1", "Content-Length: abc\r\n"),
            505: b"GET / HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n",
        }  # fmt: skip
        for status, data in cases.items():
            answer = exchange(address, data)
            assert answer is not None and answer.status == status, (status, answer)
            assert answer.headers["connection"] == "close" and json.loads(answer.body)["error"]
        answer = exchange(address, b"garbage\r\n\r\n")
        assert answer is not None and answer.status == 400
        answer = exchange(address, request("PUT", "/api/state", "127.0.0.1"))
        assert answer is not None and answer.status == 405 and "GET" in answer.headers["allow"]
        answer = exchange(address, request("HEAD", "/", "127.0.0.1"), head_only=True)
        assert answer is not None and answer.status == 200 and answer.body == b""
        with socket.create_connection(address, timeout=30) as sock:  # kept alive
            for _ in range(3):
                sock.sendall(request("GET", "/api/running", "127.0.0.1"))
                answer = read_answer(sock)
                assert answer is not None and answer.status == 200


def test_a_silent_connection_is_closed(real_beanstalkd: BeanstalkServer, tmp_path: Path) -> None:
    with supervised(real_beanstalkd, tmp_path) as sup:
        s = socket.create_connection(("127.0.0.1", sup.port), timeout=3 * REQUEST_TIMEOUT)
        with s:
            s.sendall(b"GET / HTTP/1.1\r\n")  # a slow client that never finishes
            assert closed_by_peer(s)  # within the request timeout, not the socket's


def test_client_trouble_reaches_stderr_as_log_lines_only(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    with supervised(real_beanstalkd, tmp_path, TOKEN, "--log-format", "json") as sup:
        address = ("127.0.0.1", sup.port)
        bad_length = request("POST", "/api/actions/drain", "127.0.0.1", "Content-Length: abc\r\n")
        for _ in range(50):
            answer = exchange(address, bad_length)
            assert answer is not None and answer.status == 400
        for _ in range(50):  # each resets the connection mid-answer
            with socket.create_connection(address, timeout=30) as sock:
                sock.sendall(request("GET", "/api/state", "127.0.0.1"))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_until(lambda: get(sup.url + "api/running")[0] == 200, timeout=30,
                   message="the dashboard, once the resets are dealt with")  # fmt: skip
    lines = (tmp_path / "cmdstalk.err").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line one JSON record
    dashboard = [r for r in records if r["logger"] == "cmdstalk.dashboard"]
    assert len(dashboard) <= 5, dashboard  # 100 troubles, a line or two

