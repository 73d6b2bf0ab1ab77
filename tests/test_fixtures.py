"""The fixtures themselves: a real round trip through each server kind."""

from __future__ import annotations

import socket
from pathlib import Path

import greenstalk
import psutil
import pytest

from tests.helpers import (
    BeanstalkServer,
    ServerStartError,
    WaitTimeout,
    accepts_connections,
    beanstalkd_path,
    ephemeral_low,
    free_port,
    running_beanstalkd,
    start_server_process,
    wait_until,
    worker_ports,
)


def test_put_reserve_delete_round_trip(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="roundtrip")
    worker = beanstalk.client(watch="roundtrip")
    job_id = producer.put(b"hello \r\n\x00 world", priority=7, ttr=30)
    job = worker.reserve(timeout=5)
    assert job.id == job_id
    assert job.body == "hello \r\n\x00 world"
    stats = worker.stats_job(job)
    assert stats["state"] == "reserved"
    assert stats["pri"] == 7
    worker.delete(job)
    assert producer.stats_tube("roundtrip")["total-jobs"] == 1
    assert producer.stats()["current-jobs-ready"] == 0
    with pytest.raises(greenstalk.NotFoundError):
        worker.stats_job(job_id)


def test_wait_until_returns_value_and_times_out() -> None:
    calls = iter(range(100))
    assert wait_until(lambda: next(calls) >= 3, timeout=1) is True
    with pytest.raises(WaitTimeout, match="never"):
        wait_until(lambda: False, timeout=0.05, message="never")


def test_launcher_stops_the_server_and_removes_its_stderr() -> None:
    binary = beanstalkd_path()
    if binary is None:
        pytest.skip("beanstalkd not found")
    server = start_server_process(lambda p: [binary, "-l", "127.0.0.1", "-p", str(p)])
    try:
        assert accepts_connections("127.0.0.1", server.port)
        assert server.stderr_path.exists()
    finally:
        server.stop()
    assert server.proc.returncode is not None
    assert not server.stderr_path.exists()


def test_launcher_reports_a_server_that_exits(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    script = f"echo started >> {starts}; echo 'cannot serve' >&2; exit 3"
    with pytest.raises(ServerStartError, match="exited with 3: cannot serve"):
        start_server_process(lambda p: ["/bin/sh", "-c", script], attempts=2)
    # On a port it picked itself, the launcher tried another port before giving up.
    assert starts.read_text().count("started") == 2


def test_launcher_gives_up_on_a_port_already_taken() -> None:
    if beanstalkd_path() is None:
        pytest.skip("beanstalkd not found")
    with socket.socket() as taken:
        # Bound, not listening: beanstalkd cannot bind it, and nothing answers on it.
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError, match="exited"), running_beanstalkd(port=port):
            pass


def test_launcher_kills_a_server_that_never_listens(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"echo $$ > {pidfile}; exec sleep 60"
    with pytest.raises(ServerStartError, match="timed out"):
        start_server_process(lambda p: ["/bin/sh", "-c", script], timeout=2)
    pid = int(pidfile.read_text())
    assert not psutil.pid_exists(pid), "killed and reaped, not left running"


def test_parallel_workers_draw_ports_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(worker_ports()))
        assert free_port() in slices[-1] or not slices[-1]
    assert all(len(s) > 1000 for s in slices)
    assert not (slices[0] & slices[1] or slices[1] & slices[2] or slices[0] & slices[2])
    # Below the kernel's ephemeral range: no outgoing connection takes one of them.
    assert max(slices[2]) < ephemeral_low()
