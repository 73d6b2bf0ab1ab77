"""Brokers under SCHED_BATCH, their commands under the supervisor's own policy
(``process/sched.py``), read back from ``/proc`` of real threads and processes.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from cmdstalk_py.process import batch_thread, restore_thread
from cmdstalk_py.process.sched import spawn_options
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer
from tests.supervisor.conftest import Collector, config_for

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling")

# The command prints the policy of every thread of the supervisor, then its own.
REPORT_POLICIES = "grep -H '^policy' /proc/$PPID/task/*/sched /proc/$$/sched"
_LINE = re.compile(r"^/proc/\d+(?:/task/(\d+))?/sched:policy\s*:\s*(\d+)$")


T = TypeVar("T")


def in_thread(body: Callable[[], T]) -> T:
    """Run ``body`` on a new thread (its policy changes die with it); return its value."""
    box: list[T] = []
    thread = threading.Thread(target=lambda: box.append(body()))
    thread.start()
    thread.join(30)
    assert box, "the thread failed"
    return box[0]


def test_batch_thread_switches_the_thread_and_restores_it() -> None:
    def body() -> tuple[bool, int, dict[str, Any], bool, int, dict[str, Any]]:
        switched = batch_thread()
        during, options = os.sched_getscheduler(0), dict(spawn_options())
        again = batch_thread()  # already switched: nothing to do
        restore_thread()
        return switched, during, options, again, os.sched_getscheduler(0), spawn_options()

    switched, during, options, again, after, options_after = in_thread(body)
    assert (switched, during, again) == (True, os.SCHED_BATCH, False)
    assert list(options) == ["scheduler"]
    assert options["scheduler"][0] == os.SCHED_OTHER
    assert (after, options_after) == (os.SCHED_OTHER, {})
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread was never touched


def test_a_thread_under_another_policy_is_left_alone() -> None:
    def body() -> tuple[bool, int, dict[str, Any]]:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return batch_thread(), os.sched_getscheduler(0), spawn_options()

    assert in_thread(body) == (False, os.SCHED_IDLE, {})


def policies(output: str) -> tuple[dict[int, int], int]:
    """The supervisor's threads' policies by thread id, and the command's own."""
    threads: dict[int, int] = {}
    own = -1
    for line in output.splitlines():
        match = _LINE.match(line)
        assert match, line
        tid, policy = match.groups()
        if tid is not None:
            threads[int(tid)] = int(policy)
        else:
            own = int(policy)
    return threads, own


def run_broker_once(
    beanstalk: BeanstalkServer,
    tube: str,
    batch: bool,
    before: Callable[[], None] | None = None,
    per_tube: int = 1,
) -> tuple[int, dict[int, int], int]:
    """One job through ``Broker.run`` on a new thread: (thread id, threads' policies while
    the command ran, the command's policy)."""
    beanstalk.client(use=tube).put(b"x", ttr=30)
    seen = Collector()
    config = config_for(
        beanstalk, REPORT_POLICIES, tubes=(tube,), per_tube=per_tube, batch_scheduling=batch
    )
    broker = Broker(config, tube, 0, seen)

    def body() -> int:
        if before is not None:
            before()
        broker.run(max_jobs=1)
        return threading.get_native_id()

    tid = in_thread(body)
    (result,) = seen.results
    assert result.outcome is Outcome.DELETED, result
    threads, own = policies(result.stdout_tail)
    return tid, threads, own


def test_a_broker_runs_batch_and_its_command_does_not(beanstalk: BeanstalkServer) -> None:
    tid, threads, own = run_broker_once(beanstalk, "sched-batch", batch=True)
    assert threads[tid] == os.SCHED_BATCH
    assert own == os.SCHED_OTHER
    assert threads[threading.get_native_id()] == os.SCHED_OTHER  # only the broker's thread


def test_no_batch_scheduling_leaves_the_broker_alone(beanstalk: BeanstalkServer) -> None:
    tid, threads, own = run_broker_once(beanstalk, "sched-off", batch=False)
    assert (threads[tid], own) == (os.SCHED_OTHER, os.SCHED_OTHER)


def test_brokers_that_are_not_alone_are_left_alone(beanstalk: BeanstalkServer) -> None:
    tid, threads, own = run_broker_once(beanstalk, "sched-crowd", batch=True, per_tube=2)
    assert (threads[tid], own) == (os.SCHED_OTHER, os.SCHED_OTHER)


def test_a_supervisor_under_sched_idle_keeps_it_for_its_commands(
    beanstalk: BeanstalkServer,
) -> None:
    def idle() -> None:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    tid, threads, own = run_broker_once(beanstalk, "sched-idle", batch=True, before=idle)
    assert (threads[tid], own) == (os.SCHED_IDLE, os.SCHED_IDLE)
