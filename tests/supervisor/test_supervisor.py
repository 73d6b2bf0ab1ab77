"""The supervisor in-process (on a thread): dispatch, --all discovery, --max-jobs, shutdown."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import greenstalk
import pytest

from cmdstalk_py.supervisor.lifecycle import Supervisor, SupervisorState
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer, running_beanstalkd, wait_until
from tests.supervisor.conftest import Collector, config_for, supervising


def _reserved(server: BeanstalkServer, tube: str) -> int:
    stats = server.client().stats_tube(tube)
    return int(stats["current-jobs-reserved"])


def test_per_tube_brokers_run_jobs_concurrently(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="par")
    ids = [producer.put(b"", ttr=30) for _ in range(3)]
    with supervising(beanstalk, "sleep 0.5", tubes=("par",), per_tube=3) as run:
        wait_until(lambda: _reserved(beanstalk, "par") == 3, 10, message="3 jobs reserved")
        results = run.collector.wait_results(3)
        assert sorted(r.job_id for r in results) == ids
        assert {r.slot for r in results} == {0, 1, 2}
        assert all(r.outcome is Outcome.DELETED for r in results)
        assert run.collector.ready_calls == 1


def test_several_tubes(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client()
    ids = {}
    for tube in ("t-a", "t-b"):
        producer.use(tube)
        ids[tube] = producer.put(tube.encode(), ttr=30)
    with supervising(beanstalk, "cat", tubes=("t-a", "t-b")) as run:
        results = run.collector.wait_results(2)
    assert {(r.tube, r.job_id, r.stdout_tail) for r in results} == {
        ("t-a", ids["t-a"], "t-a"),
        ("t-b", ids["t-b"], "t-b"),
    }


def test_all_serves_a_tube_created_after_start(beanstalk: BeanstalkServer) -> None:
    with supervising(beanstalk, "cat", all_tubes=True, discover_interval=0.1) as run:
        wait_until(lambda: run.collector.ready_calls == 1, 10, message="ready")
        producer = beanstalk.client(use="late-tube")
        job_id = producer.put(b"late", ttr=30)
        result = run.collector.wait_outcome(job_id, Outcome.DELETED)
        assert (result.tube, result.stdout_tail) == ("late-tube", "late")
        assert "late-tube" in run.supervisor.dispatcher.tubes()


def test_max_jobs_exits_after_n_jobs(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="maxj")
    for _ in range(5):
        producer.put(b"", ttr=30)
    collector = Collector()
    sup = Supervisor(config_for(beanstalk, "true", tubes=("maxj",), per_tube=2, max_jobs=3),
                     collector)
    assert sup.run(install_signals=False) == 0
    assert len(collector.results) == 3
    assert collector.closed and collector.stopping_calls == 1
    stats = producer.stats_tube("maxj")
    assert (stats["current-jobs-ready"], stats["current-jobs-reserved"]) == (2, 0)


def test_graceful_stop_lets_running_jobs_finish(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="grace")
    ids = [producer.put(b"", ttr=30) for _ in range(4)]
    with supervising(beanstalk, "sleep 1; echo done", tubes=("grace",), per_tube=2) as run:
        wait_until(lambda: run.collector.busy_now() == 2, 10, message="2 jobs running")
        run.supervisor.request_stop()
        run.thread.join(15)
        assert not run.thread.is_alive()
        results = run.collector.snapshot()
        assert [(r.outcome, r.stdout_tail) for r in results] == [(Outcome.DELETED, "done\n")] * 2
        assert run.supervisor.state is SupervisorState.STOPPED
        assert run.collector.stopping_calls == 1 and run.collector.closed
        assert run.collector.heartbeats >= 1
    stats = producer.stats_tube("grace")
    assert (stats["current-jobs-ready"], stats["current-jobs-reserved"]) == (2, 0)
    assert len(ids) == 4


def test_shutdown_timeout_kills_and_releases(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="shut")
    job_id = producer.put(b"", priority=77, ttr=60)
    with supervising(beanstalk, "sleep 60", tubes=("shut",), shutdown_timeout=0.3) as run:
        wait_until(lambda: run.collector.busy_now() == 1, 10, message="job running")
        started = time.monotonic()
        run.supervisor.request_stop()
        run.thread.join(15)
        assert time.monotonic() - started < 5
        (result,) = run.collector.snapshot()
    assert (result.outcome, result.release_delay) == (Outcome.SHUTDOWN_RELEASED, None)
    assert result.signal is not None
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["pri"], stats["delay"]) == ("ready", 77, 0)


def test_second_stop_kills_at_once_and_releases(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="twice")
    job_id = producer.put(b"", ttr=60)
    cmd = "trap '' TERM; sleep 60"
    with supervising(beanstalk, cmd, tubes=("twice",)) as run:
        wait_until(lambda: run.collector.busy_now() == 1, 10, message="job running")
        run.supervisor.request_stop()
        time.sleep(0.3)  # the first stop alone must not end a job within its TTR
        assert run.thread.is_alive() and not run.collector.snapshot()
        run.supervisor.request_stop()
        run.thread.join(10)
        assert not run.thread.is_alive()
        (result,) = run.collector.snapshot()
    assert result.outcome is Outcome.SHUTDOWN_RELEASED
    assert producer.stats_job(job_id)["state"] == "ready"


@pytest.mark.slow
def test_server_restart_mid_run_brokers_reconnect_and_finish(tmp_path: Path) -> None:
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    with running_beanstalkd("-b", str(binlog)) as first:
        port = first.port
        producer = first.client(use="rs")
        ids = {producer.put(str(i).encode(), ttr=30) for i in range(4)}
        # Commands far longer than the restart takes: the server is gone mid-run, never
        # between applying a delete and answering it (that job would be LOST, yet deleted).
        run_ctx = supervising(first, "sleep 1.5; cat", tubes=("rs",), per_tube=4)
        run = run_ctx.__enter__()
        try:
            wait_until(lambda: _reserved(first, "rs") == 4, 10, message="4 jobs in flight")
            first.close_clients()
        except BaseException:
            run_ctx.__exit__(None, None, None)
            raise
    # The server is gone with jobs in flight; same port, same binlog.
    try:
        with running_beanstalkd("-b", str(binlog), port=port) as second:

            def deleted() -> set[int]:
                return {r.job_id for r in run.collector.snapshot() if r.outcome is Outcome.DELETED}

            wait_until(lambda: deleted() == ids, 30, message="every job deleted after restart")
            results = run.collector.snapshot()
            lost = {r.job_id for r in results if r.outcome is Outcome.LOST}
            assert lost == ids  # and not acted on blindly after the reconnect
            assert run.collector.reconnects
            stats = second.client().stats()
            assert stats["current-jobs-ready"] + stats["current-jobs-reserved"] == 0
            assert stats["current-jobs-delayed"] + stats["current-jobs-buried"] == 0
    finally:
        run_ctx.__exit__(None, None, None)


def test_ready_waits_for_the_server(tmp_path: object) -> None:
    # No server yet: brokers retry (logging each attempt) and READY comes once they connect.
    from tests.helpers import free_port

    port = free_port()
    collector = Collector()
    from cmdstalk_py.supervisor.config import Config

    sup = Supervisor(Config(cmd="true", port=port, reconnect_max_wait=0.2), collector)
    thread = threading.Thread(target=sup.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        time.sleep(0.3)  # the absence of READY cannot be polled for
        assert collector.ready_calls == 0 and sup.state is SupervisorState.STARTING
        with running_beanstalkd(port=port) as server:
            wait_until(lambda: collector.ready_calls == 1, 10, message="READY")
            job_id = server.client().put(b"", ttr=30)
            collector.wait_outcome(job_id, Outcome.DELETED)
    finally:
        sup.request_stop()
        thread.join(10)
    assert not thread.is_alive()


def test_stop_interrupts_idle_reserves(beanstalk: BeanstalkServer) -> None:
    # Reserve timeout 60 s: without the interrupt, idle brokers would hold shutdown for it.
    with supervising(beanstalk, "true", tubes=("idle",), per_tube=3, reserve_timeout=60) as run:
        wait_until(lambda: run.collector.ready_calls == 1, 10, message="ready")
        wait_until(
            lambda: beanstalk.client().stats_tube("idle")["current-waiting"] == 3,
            10,
            message="3 brokers waiting in reserve",
        )
        started = time.monotonic()
        run.supervisor.request_stop()
        run.thread.join(20)
        assert not run.thread.is_alive()
        assert time.monotonic() - started < 10
    assert run.collector.results == []
    check = beanstalk.client()

    def unwatched() -> bool:
        try:
            return check.stats_tube("idle")["current-watching"] == 0
        except greenstalk.NotFoundError:  # an empty tube nobody watches is dropped
            return True

    wait_until(unwatched, 10, message="brokers gone")


def test_max_jobs_serves_a_tube_whose_worker_started_after_idle_ones(
    beanstalk: BeanstalkServer,
) -> None:
    # Three workers, one ticket: the workers of the empty tubes must not keep it while
    # the job's tube waits (they reserve with a timeout and hand it back).
    tubes = ("mj-empty-1", "mj-empty-2", "mj-job")
    job_id = beanstalk.client(use="mj-job").put(b"", ttr=30)
    collector = Collector()
    sup = Supervisor(config_for(beanstalk, "true", tubes=tubes, max_jobs=1), collector)
    thread = threading.Thread(target=sup.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        collector.wait_outcome(job_id, Outcome.DELETED, timeout=30)
        thread.join(30)
        assert not thread.is_alive(), "--max-jobs 1 done: the supervisor stops"
    finally:
        if thread.is_alive():
            sup.request_stop()
            sup.request_stop()
            thread.join(20)
