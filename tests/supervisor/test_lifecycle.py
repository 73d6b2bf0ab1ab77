"""The supervisor's state machine, one ``_step(now)`` at a time, on a hand-driven clock.

The dispatcher and its brokers are real (an event loop on a thread of the test's, a real
server, real job commands); only the clock the lifecycle reads is ours, so the shutdown
timeout and the heartbeat are checked at exact instants without waiting for them. Each
step runs on that loop, as the main coroutine would run it. What the brokers do in
reaction (a job killed, a broker gone) is polled for with a deadline, stepping at the
same instant.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future as ThreadFuture
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cmdstalk_py.loop.core import Loop
from cmdstalk_py.supervisor.lifecycle import HEARTBEAT_INTERVAL, Supervisor, SupervisorState
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import Collector, config_for

T0 = 1000.0  # any instant: the lifecycle only compares differences
_LOOPS: dict[int, Loop] = {}


def _on_loop(sup: Supervisor, work: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``work()`` as a task of the supervisor's loop (on its thread); its result."""
    loop, outcome = _LOOPS[id(sup)], ThreadFuture[Any]()

    def begin() -> None:
        task = loop.create_task(work())

        def settle(done: Any) -> None:
            try:
                outcome.set_result(done.result())
            except BaseException as e:
                outcome.set_exception(e)

        task.add_done_callback(settle)

    loop.call_soon_threadsafe(begin)
    return outcome.result(30)


def step(sup: Supervisor, now: float) -> bool:
    """One ``_step(now)`` on the supervisor's loop."""
    return bool(_on_loop(sup, lambda: sup._step(now)))


def start(sup: Supervisor) -> None:
    async def started() -> None:
        sup.dispatcher.start()

    _on_loop(sup, started)


@contextmanager
def stepped(
    server: BeanstalkServer, cmd: str, *, start_now: bool = True, **overrides: Any
) -> Iterator[tuple[Supervisor, Collector]]:
    """A Supervisor whose main loop is the test: its dispatcher runs, nobody calls run()."""
    collector = Collector()
    sup = Supervisor(config_for(server, cmd, **overrides), collector)
    loop = Loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    _LOOPS[id(sup)] = loop
    try:
        if start_now:
            start(sup)
        yield sup, collector
    finally:
        _on_loop(sup, sup._finish)  # what run() does on the way out, killing what runs
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        del _LOOPS[id(sup)]


def step_until(sup: Supervisor, now: float, state: SupervisorState) -> bool:
    """Step at ``now`` (the clock stands still) until the brokers let ``state`` come.

    Returns what the step that reached ``state`` returned (True: the main loop would end).
    """
    returned: list[bool] = []

    def reached() -> bool:
        returned.append(step(sup, now))
        return sup.state is state

    wait_until(reached, 15, message=f"state {state.value}")
    return returned[-1]


def running_job(sup: Supervisor, collector: Collector) -> None:
    step_until(sup, T0, SupervisorState.RUNNING)
    wait_until(lambda: collector.busy_now() == 1, 10, message="job running")


def test_starting_holds_until_the_brokers_connect(beanstalk: BeanstalkServer) -> None:
    with stepped(beanstalk, "true", start_now=False) as (sup, collector):
        # STARTING: the dispatcher has not connected anything, whatever the clock says.
        for now in (T0, T0 + 60, T0 + 3600):
            assert step(sup, now) is False
            assert sup.state is SupervisorState.STARTING
        assert collector.ready_calls == 0
        start(sup)
        # STARTING -> RUNNING once every initial broker holds a connection; READY once.
        step_until(sup, T0 + 3600, SupervisorState.RUNNING)
        step(sup, T0 + 3600)
        assert collector.ready_calls == 1 and collector.stopping_calls == 0


def test_heartbeat_follows_the_clock(beanstalk: BeanstalkServer) -> None:
    with stepped(beanstalk, "true", start_now=False) as (sup, collector):
        step(sup, T0)
        assert collector.heartbeats == 1
        step(sup, T0 + HEARTBEAT_INTERVAL / 2)
        assert collector.heartbeats == 1
        step(sup, T0 + HEARTBEAT_INTERVAL)
        assert collector.heartbeats == 2
        step(sup, T0 + HEARTBEAT_INTERVAL * 1.5)
        assert collector.heartbeats == 2


def test_stop_request_drains_then_stops(beanstalk: BeanstalkServer) -> None:
    # Idle brokers in a long reserve: the drain interrupts them instead of waiting it out.
    with stepped(beanstalk, "true", tubes=("lc-stop",), per_tube=2, reserve_timeout=60) as (
        sup,
        collector,
    ):
        step_until(sup, T0, SupervisorState.RUNNING)
        sup.request_stop()
        # RUNNING -> DRAINING: no new reservations; nothing to kill.
        stopped = step(sup, T0)
        assert sup.state is (SupervisorState.STOPPED if stopped else SupervisorState.DRAINING)
        assert sup.stop_reserving.is_set() and not sup.kill.is_set()
        assert not sup.kill_now.is_set()
        assert collector.stopping_calls == 1
        # DRAINING -> STOPPED once every broker has returned; the clock never moved.
        assert step_until(sup, T0, SupervisorState.STOPPED) is True
        assert collector.stopping_calls == 1 and collector.results == []


def test_shutdown_timeout_kills_at_its_deadline(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="lc-timeout")
    job_id = producer.put(b"", ttr=600)
    with stepped(beanstalk, "sleep 600", tubes=("lc-timeout",), shutdown_timeout=30) as (
        sup,
        collector,
    ):
        running_job(sup, collector)
        sup.request_stop()
        step(sup, T0)
        assert sup.state is SupervisorState.DRAINING
        # The job may use the whole timeout: one tick before it, still nobody is killed.
        step(sup, T0 + 29.99)
        assert sup.state is SupervisorState.DRAINING and not sup.kill.is_set()
        assert collector.busy_now() == 1
        # At the deadline: TERM, grace, KILL; the job goes back to the queue.
        step(sup, T0 + 30)
        assert sup.kill.is_set() and not sup.kill_now.is_set()
        assert step_until(sup, T0 + 30, SupervisorState.STOPPED) is True
        result = collector.wait_outcome(job_id, Outcome.SHUTDOWN_RELEASED)
        assert result.signal is not None
    assert producer.stats_job(job_id)["state"] == "ready"


def test_no_shutdown_timeout_waits_for_the_job(beanstalk: BeanstalkServer) -> None:
    beanstalk.client(use="lc-patient").put(b"", ttr=600)
    with stepped(beanstalk, "sleep 600", tubes=("lc-patient",)) as (sup, collector):
        running_job(sup, collector)
        sup.request_stop()
        for now in (T0, T0 + 3600, T0 + 86400):
            assert step(sup, now) is False
            assert sup.state is SupervisorState.DRAINING
        assert not sup.kill.is_set() and not sup.kill_now.is_set()
        assert collector.busy_now() == 1


def test_second_stop_request_kills_at_once(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="lc-twice")
    job_id = producer.put(b"", ttr=600)
    cmd = "trap '' TERM; sleep 600"
    with stepped(beanstalk, cmd, tubes=("lc-twice",), shutdown_timeout=3600) as (
        sup,
        collector,
    ):
        running_job(sup, collector)
        sup.request_stop()
        step(sup, T0)
        assert sup.state is SupervisorState.DRAINING and not sup.kill_now.is_set()
        # A second signal: every running command is killed now, the clock standing still.
        sup.request_stop()
        step(sup, T0)
        assert sup.kill_now.is_set() and not sup.kill.is_set()
        assert step_until(sup, T0, SupervisorState.STOPPED) is True
        collector.wait_outcome(job_id, Outcome.SHUTDOWN_RELEASED)
        assert collector.stopping_calls == 1
    assert producer.stats_job(job_id)["state"] == "ready"


def test_max_jobs_spent_drains_and_stops(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    producer = beanstalk.client(use="lc-max")
    first, second = producer.put(b"", ttr=60), producer.put(b"", ttr=60)
    go = tmp_path / "go"
    # The job holds on until the test has seen RUNNING: a broker done with its budget leaves.
    cmd = f"while [ ! -e {go} ]; do sleep 0.01; done"
    with stepped(beanstalk, cmd, tubes=("lc-max",), max_jobs=1) as (sup, collector):
        running_job(sup, collector)
        go.touch()
        wait_until(lambda: sup.budget.spent, 15, message="--max-jobs spent")
        # RUNNING -> DRAINING once the one job is done, with no signal at all.
        stopped = step(sup, T0)
        assert sup.state is (SupervisorState.STOPPED if stopped else SupervisorState.DRAINING)
        assert sup.stop_reserving.is_set() and collector.stopping_calls == 1
        if not stopped:
            assert step_until(sup, T0, SupervisorState.STOPPED) is True
        assert [r.job_id for r in collector.snapshot()] == [first]
    assert producer.stats_job(second)["state"] == "ready"
