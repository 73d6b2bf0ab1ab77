"""The supervisor's one event loop: thousands of workers, a held loop reported, signals at
any point of a job's life.

Real servers and real processes throughout. The signal property drives stop and reload
requests (what SIGTERM and SIGHUP do) at random moments of jobs' lives and checks what
must hold whatever the moment: the supervisor stops, no job is lost or run twice at once,
and no command is left running.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.lifecycle import LAG_WARN, Supervisor
from cmdstalk_py.supervisor.results import JobResult, Outcome
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import Collector, config_for, supervising


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_thousand_workers_over_four_hundred_tubes_start_serve_and_stop(
    real_beanstalkd: BeanstalkServer,
) -> None:
    server = real_beanstalkd
    tubes = tuple(f"many-{n}" for n in range(400))
    before = threading.active_count()
    with supervising(server, "cat", tubes=tubes, per_tube=5) as run:
        wait_until(
            lambda: server.client().stats()["current-waiting"] >= 2000, 300,
            interval=0.2, message="2,000 workers waiting in reserve",
        )  # fmt: skip
        assert run.collector.ready_calls == 1
        # One loop: no thread per worker (the loop's own, its executors, the test's).
        assert threading.active_count() - before <= 16
        producer = server.client()
        ids = {}
        for tube in tubes[::40]:
            producer.use(tube)
            ids[producer.put(tube.encode(), ttr=60)] = tube
        results = run.collector.wait_results(len(ids), timeout=120)
        assert {r.job_id: r.stdout_tail for r in results} == ids
        assert all(r.outcome is Outcome.DELETED for r in results)
        run.supervisor.request_stop()
        run.thread.join(120)
        assert not run.thread.is_alive(), "2,000 workers stopped"
    wait_until(lambda: server.client().stats()["current-waiting"] == 0, 60,
               message="every connection closed")  # fmt: skip


class _HoldsTheLoop(Observer):
    """Holds the loop once, in a job's report: what a blocking observer would do."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.lags: list[float] = []

    def job_finished(self, result: JobResult) -> None:
        if self.hold:
            hold, self.hold = self.hold, 0.0
            time.sleep(hold)  # the point of the test: a callback that blocks the loop

    def loop_lag(self, seconds: float) -> None:
        self.lags.append(seconds)


def test_a_held_loop_is_reported_and_warned_about(
    beanstalk: BeanstalkServer, caplog: pytest.LogCaptureFixture
) -> None:
    holder = _HoldsTheLoop(hold=LAG_WARN * 4)
    sup = Supervisor(config_for(beanstalk, "true", tubes=("lag",)), holder)
    thread = threading.Thread(target=sup.run, kwargs={"install_signals": False}, daemon=True)
    with caplog.at_level(logging.WARNING, logger="cmdstalk"):
        thread.start()
        try:
            wait_until(lambda: holder.lags, 10, message="a loop-lag figure")
            beanstalk.client(use="lag").put(b"", ttr=30)
            wait_until(lambda: any(lag > LAG_WARN for lag in holder.lags), 20,
                       message="the lag of the held loop")  # fmt: skip
        finally:
            sup.request_stop()
            sup.request_stop()
            thread.join(20)
    assert not thread.is_alive()
    assert any("event loop was held for" in r.getMessage() for r in caplog.records)
    assert sup.loop_lag >= 0.0


# -- signals at any point of a job's life --------------------------------------------------

# Each event: after that many milliseconds, a stop request (SIGTERM) or a reload (SIGHUP).
EVENTS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=400), st.sampled_from(["stop", "hup"])),
    min_size=1,
    max_size=4,
)


@pytest.mark.slow
@pytest.mark.timeout(600)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=EVENTS)
def test_signals_at_any_moment_lose_no_job_and_leave_no_command(
    real_beanstalkd: BeanstalkServer, tmp_path: Path, events: list[tuple[int, str]]
) -> None:
    server = real_beanstalkd
    tube = f"sig-{time.monotonic_ns()}"
    producer = server.client(use=tube)
    ids = [producer.put(b"%d" % n, ttr=30) for n in range(6)]
    # Jobs of different lengths, so requests land before, during and after commands.
    cmd = 'read n; sleep "0.0$n"; echo "$n"'
    collector = Collector()
    sup = Supervisor(
        config_for(server, cmd, tubes=(tube,), per_tube=2, shutdown_timeout=1.0),
        collector,
        reload=lambda: [config_for(server, cmd, tubes=(tube,), per_tube=2)],
    )
    thread = threading.Thread(target=sup.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    stops = 0
    try:
        for after_ms, kind in events:
            time.sleep(after_ms / 1000)  # the random moment is the input under test
            if kind == "stop":
                stops += 1
                sup.request_stop()
            else:
                sup.request_reload()
        if not stops:
            sup.request_stop()
        thread.join(60)
        assert not thread.is_alive(), "the supervisor stopped"
    finally:
        if thread.is_alive():
            sup.request_stop()
            sup.request_stop()
            thread.join(30)
    # Every job is done once, or back in the queue unrun or released: none lost.
    done = {r.job_id for r in collector.snapshot() if r.outcome is Outcome.DELETED}
    for job_id in ids:
        if job_id in done:
            continue
        state = producer.stats_job(job_id)["state"]
        assert state in ("ready", "delayed"), (job_id, state)
    assert len([r for r in collector.snapshot() if r.outcome is Outcome.DELETED]) == len(done)
    # No command of ours left running, and none lost mid-way.
    assert not [r for r in collector.snapshot() if r.outcome is Outcome.LOST]
    left = [
        p for p in psutil.Process().children(recursive=True)
        if "read n; sleep" in " ".join(_cmdline(p))
    ]  # fmt: skip
    assert not left, left
    producer.close()


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
