"""Long jobs (issue #19): --keep-alive touches the job ahead of each TTR expiry while the
command runs; --max-runtime bounds the command instead, and the timeout policy applies."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import greenstalk
import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.results import JobResult, Outcome, Reason
from tests.helpers import BeanstalkServer, beanstalkd_path, start_server_process, wait_until
from tests.supervisor.conftest import Collector, config_for, run_one


@pytest.mark.slow
def test_keep_alive_job_running_ten_times_its_ttr_is_deleted_with_no_timeout(
    beanstalk: BeanstalkServer,
) -> None:
    producer = beanstalk.client(use="long")
    job_id = producer.put(b"", ttr=2)
    broker = Broker(config_for(beanstalk, "sleep 20", keep_alive=True), "long", 0)
    started = time.monotonic()
    result = run_one(broker, timeout=60)
    assert time.monotonic() - started >= 20
    assert (result.job_id, result.outcome, result.exit_code) == (job_id, Outcome.DELETED, 0)
    assert result.killed is None
    with pytest.raises(greenstalk.NotFoundError):
        producer.stats_job(job_id)
    assert producer.stats()["job-timeouts"] == 0  # the server never took it back


def test_without_keep_alive_the_ttr_still_kills(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="short")
    job_id = producer.put(b"", ttr=2)
    result = run_one(Broker(config_for(beanstalk, "exec sleep 20"), "short", 0))
    assert (result.outcome, result.killed, result.reason) == (
        Outcome.TIMEOUT_BURIED, Reason.TTR, Reason.TTR,
    )  # fmt: skip
    assert result.duration_ms < 2000
    assert producer.stats_job(job_id)["state"] == "buried"


def test_max_runtime_kills_and_buries(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="maxrt")
    job_id = producer.put(b"", ttr=30)
    seen = Collector()
    config = config_for(beanstalk, "exec sleep 30", max_runtime=1.0)
    result = run_one(Broker(config, "maxrt", 0, seen))
    assert (result.outcome, result.killed, result.reason) == (
        Outcome.TIMEOUT_BURIED, Reason.MAX_RUNTIME, Reason.MAX_RUNTIME,
    )  # fmt: skip
    assert 900 <= result.duration_ms < 10_000
    assert [name for _, name in seen.kills][:1] == ["SIGTERM"]
    assert producer.stats_job(job_id)["state"] == "buried"


@pytest.mark.slow
def test_keep_alive_past_the_ttr_until_max_runtime(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="bound")
    job_id = producer.put(b"", ttr=1)
    config = config_for(beanstalk, "exec sleep 30", keep_alive=True, max_runtime=4.0)
    result = run_one(Broker(config, "bound", 0), timeout=30)
    assert (result.outcome, result.killed) == (Outcome.TIMEOUT_BURIED, Reason.MAX_RUNTIME)
    assert 3900 <= result.duration_ms < 10_000
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["timeouts"]) == ("buried", 0)


def test_on_timeout_release_until_max_timeouts(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="again")
    job_id = producer.put(b"", priority=5, ttr=30)
    config = config_for(
        beanstalk, "exec sleep 30", max_runtime=0.5, on_timeout="release", max_timeouts=2
    )
    broker = Broker(config, "again", 0)
    first = run_one(broker)
    assert (first.outcome, first.reason, first.killed, first.release_delay) == (
        Outcome.RELEASED, Reason.MAX_RUNTIME, Reason.MAX_RUNTIME, 0,
    )  # fmt: skip
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["releases"], stats["pri"]) == ("ready", 1, 5)
    second = run_one(broker)
    assert (second.outcome, second.reason) == (Outcome.TIMEOUT_BURIED, Reason.MAX_TIMEOUTS)
    assert producer.stats_job(job_id)["state"] == "buried"
    # A kick forgives one: the job runs once more, and is buried again at its next kill.
    producer.kick_job(job_id)
    third = run_one(broker)
    assert (third.outcome, third.reason) == (Outcome.TIMEOUT_BURIED, Reason.MAX_TIMEOUTS)


def test_a_failed_touch_kills_the_command_at_once(tmp_path: Path) -> None:
    """The server dies under a keep-alive job: the touch fails, the job is no longer ours
    (another worker may get it), so the command is killed now, not at some later deadline."""
    binary = beanstalkd_path()
    if binary is None:
        pytest.skip("no beanstalkd")
    server = start_server_process(lambda p: [binary, "-l", "127.0.0.1", "-p", str(p)])
    try:
        bs = BeanstalkServer("beanstalkd", "127.0.0.1", server.port)
        broker, thread, results = _keep_alive_job(bs, "doomed", tmp_path)
        bs.close_clients()
        server.stop(signal.SIGKILL)
        result = _ended(thread, results, 15)
        assert (result.outcome, result.killed) == (Outcome.LOST, Reason.TTR)
        # Killed at the first touch that failed (2.5 s), not at the deadline (5 s).
        assert result.duration_ms < 4500
        broker.close()
    finally:
        server.stop(signal.SIGKILL)


@pytest.mark.parametrize("kind", ["beanstalkd", "bundled"])
def test_a_silent_server_does_not_hold_the_kill(kind: str, tmp_path: Path) -> None:
    """The server stops answering (SIGSTOP) under a keep-alive job: the touch waits for
    its reply until the kill point at most, not the whole I/O timeout, so the command is
    killed before the server's TTR runs out (another worker may get the job then)."""
    if kind == "beanstalkd":
        binary = beanstalkd_path()
        if binary is None:
            pytest.skip("no beanstalkd")
        server = start_server_process(lambda p: [binary, "-l", "127.0.0.1", "-p", str(p)])
    else:
        server = start_server_process(
            lambda p: [sys.executable, "-m", "cmdstalk_py.server", "-l", "127.0.0.1", "-p", str(p)]
        )
    try:
        bs = BeanstalkServer(kind, "127.0.0.1", server.port)
        broker, thread, results = _keep_alive_job(bs, "mute", tmp_path)
        assert broker.config.io_timeout >= 30  # what the touch would wait without a bound
        bs.close_clients()
        server.proc.send_signal(signal.SIGSTOP)
        try:
            result = _ended(thread, results, 20)
        finally:
            server.proc.send_signal(signal.SIGCONT)
        assert (result.outcome, result.killed) == (Outcome.LOST, Reason.TTR)
        # Killed at the kill point (5 s), not after the I/O timeout (30 s past the touch).
        assert 4500 <= result.duration_ms < 8000, result.duration_ms
        broker.close()
    finally:
        server.stop(signal.SIGKILL)


def _keep_alive_job(
    bs: BeanstalkServer, tube: str, tmp_path: Path
) -> tuple[Broker, threading.Thread, list[JobResult | None]]:
    """A keep-alive job with TTR 8 (touched at 2.5 s, killed 5 s after the reservation
    without a touch) running ``sleep 60`` on a broker thread: returned once it runs."""
    bs.client(use=tube).put(b"", ttr=8)
    started = tmp_path / "started"
    config = config_for(bs, f"touch {started}; exec sleep 60", keep_alive=True)
    broker = Broker(config, tube, 0)
    results: list[JobResult | None] = []
    thread = threading.Thread(target=lambda: results.append(broker.run_once()), daemon=True)
    thread.start()
    wait_until(started.exists, 10, message="the command running")
    return broker, thread, results


def _ended(thread: threading.Thread, results: list[JobResult | None], timeout: float) -> JobResult:
    thread.join(timeout)
    assert not thread.is_alive() and results and results[0] is not None
    return results[0]
