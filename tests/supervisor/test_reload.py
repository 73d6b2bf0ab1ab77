"""Several pools and reload (SIGHUP): added pools start, removed ones finish their running
jobs and stop reserving, changed ones switch over without killing a job, a bad source is
logged and the running pools kept. Pools are built in code; the file format is poolfile's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import greenstalk
import pytest

from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.lifecycle import Supervisor
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import Collector, config_for


class Source:
    """The pools a reload reads: set by the test, or an error (a bad file)."""

    def __init__(self, pools: Sequence[Config]) -> None:
        self.pools: Sequence[Config] | Exception = pools

    def __call__(self) -> Sequence[Config]:
        if isinstance(self.pools, Exception):
            raise self.pools
        return self.pools


@contextmanager
def pools_running(pools: Sequence[Config]) -> Iterator[tuple[Supervisor, Collector, Source]]:
    source = Source(pools)
    collector = Collector()
    sup = Supervisor(pools, collector, reload=source)
    thread = threading.Thread(target=sup.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: collector.ready_calls == 1, 10, message="ready")
        yield sup, collector, source
    finally:
        sup.request_stop()
        sup.request_stop()
        thread.join(20)
        assert not thread.is_alive()


def watchers(server: BeanstalkServer, tube: str) -> int:
    try:
        return int(server.client().stats_tube(tube)["current-watching"])
    except greenstalk.NotFoundError:
        return 0


def test_reload_adds_changes_and_removes_pools_killing_no_job(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="rl-a")
    a = config_for(beanstalk, "sleep 1; echo old", tubes=("rl-a",), workers=1, pool="a")
    b = config_for(beanstalk, "echo b", tubes=("rl-b",), workers=1, pool="b")
    with pools_running([a]) as (sup, seen, source):
        running = producer.put(b"", ttr=60)
        wait_until(lambda: seen.busy_now() == 1, 10, message="pool a's job running")
        # a changes its command, b is added: a's running job ends as it began.
        source.pools = [replace(a, cmd="echo new"), b]
        sup.request_reload()
        assert seen.wait_outcome(running, Outcome.DELETED).stdout_tail == "old\n"
        after = producer.put(b"", ttr=60)
        assert seen.wait_outcome(after, Outcome.DELETED).stdout_tail == "new\n"
        producer.use("rl-b")
        in_b = producer.put(b"", ttr=60)
        result = seen.wait_outcome(in_b, Outcome.DELETED)
        assert (result.pool, result.stdout_tail) == ("b", "b\n")
        # a is removed: its workers stop, its jobs wait for someone else.
        source.pools = [b]
        sup.request_reload()
        wait_until(lambda: watchers(beanstalk, "rl-a") == 0, 10, message="a's workers gone")
        producer.use("rl-a")
        left = producer.put(b"", ttr=60)
        assert not seen.for_job(left)
        assert [c.pool for c in sup.configs] == ["b"]
    assert beanstalk.client().stats_job(left)["state"] == "ready"
    assert all(r.outcome is Outcome.DELETED for r in seen.snapshot())


def test_a_removed_pool_lets_its_running_job_finish(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="rl-r")
    a = config_for(beanstalk, "sleep 1; echo done", tubes=("rl-r",), per_tube=1, pool="a")
    b = config_for(beanstalk, "true", tubes=("rl-other",), pool="b")
    with pools_running([a, b]) as (sup, seen, source):
        job_id = producer.put(b"", ttr=60)
        wait_until(lambda: seen.busy_now() == 1, 10, message="job running")
        source.pools = [b]
        sup.request_reload()
        result = seen.wait_outcome(job_id, Outcome.DELETED)
        assert (result.stdout_tail, result.signal) == ("done\n", None)


def test_a_bad_source_keeps_the_running_pools(
    beanstalk: BeanstalkServer, caplog: pytest.LogCaptureFixture
) -> None:
    a = config_for(beanstalk, "cat", tubes=("rl-bad",), pool="a")
    caplog.set_level(logging.ERROR, logger="cmdstalk")
    with pools_running([a]) as (sup, seen, source):
        source.pools = ValueError("pools.toml: pools.a.workers: expected an integer")
        sup.request_reload()
        wait_until(lambda: "reload failed" in caplog.text, 10, message="the error logged")
        assert "pools.toml: pools.a.workers" in caplog.text
        job_id = beanstalk.client(use="rl-bad").put(b"still", ttr=30)
        assert seen.wait_outcome(job_id, Outcome.DELETED).stdout_tail == "still"
        # Duplicate pool names are refused the same way.
        source.pools = [a, replace(a, cmd="true")]
        sup.request_reload()
        wait_until(lambda: "must be unique" in caplog.text, 10, message="duplicates refused")
        assert [c.cmd for c in sup.configs] == ["cat"]
