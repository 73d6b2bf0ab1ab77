"""A job's final command and the next reserve sent together (``Broker``).

Against both servers: a broker that stops with a reserve sent ahead must lose nothing, and
a job's report waits for the next command, never for a job that is not there. (The
client's pipelining itself: ``tests/client/test_aio.py``.)
"""

from __future__ import annotations

import threading

from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.results import JobResult, Outcome
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import Collector, config_for


def test_a_broker_closing_with_a_reserve_sent_ahead_loses_nothing(
    beanstalk: BeanstalkServer,
) -> None:
    producer = beanstalk.client(use="pipe-stop")
    first = producer.put(b"one", ttr=30)
    second = producer.put(b"two", ttr=30)
    seen = Collector()
    broker = Broker(config_for(beanstalk, "cat"), "pipe-stop", 0, seen)
    try:
        result = broker.run_once(prefetch=True)
        assert result is not None and result.job_id == first
        assert seen.results == []  # reported once the next command starts, or on close
        wait_until(
            lambda: producer.stats_job(second)["state"] == "reserved",
            10,
            message="the job reserved by the reserve sent ahead",
        )
    finally:
        broker.close()
    assert [(r.job_id, r.outcome) for r in seen.results] == [(first, Outcome.DELETED)]
    # Handed back, unrun, when the broker closed its connection.
    wait_until(
        lambda: producer.stats_job(second)["state"] == "ready",
        10,
        message="the job reserved ahead to be back in ready",
    )
    stats = producer.stats_job(second)
    assert stats["reserves"] == 1
    assert (stats["releases"], stats["timeouts"], stats["buries"]) == (0, 0, 0)


class Timeline(Observer):
    """One list of what the broker did, in order: commands starting and jobs reported."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, int]] = []
        self.starts = 0

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        if busy:
            with self.lock:
                self.starts += 1
                self.events.append(("start", self.starts))

    def job_finished(self, result: JobResult) -> None:
        with self.lock:
            self.events.append(("report", result.job_id))

    def reports(self) -> list[int]:
        with self.lock:
            return [n for kind, n in self.events if kind == "report"]


def test_a_report_waits_for_the_next_command_and_keeps_job_order(
    beanstalk: BeanstalkServer,
) -> None:
    producer = beanstalk.client(use="pipe-order")
    ids = [producer.put(b"%d" % n, ttr=30) for n in range(5)]
    seen = Timeline()
    broker = Broker(config_for(beanstalk, "cat"), "pipe-order", 0, seen)
    broker.report_wait = 10.0  # the next job is ready: its reserve reply is a round trip away
    assert broker.run(max_jobs=5) == 5
    assert seen.reports() == ids
    # Jobs 1-4 were reported after the next command started (the next reserve had gone
    # out with their delete); the last one, with no reserve sent ahead, at once.
    assert seen.events == [
        ("start", 1), ("start", 2), ("report", ids[0]), ("start", 3), ("report", ids[1]),
        ("start", 4), ("report", ids[2]), ("start", 5), ("report", ids[3]), ("report", ids[4]),
    ]


def test_a_report_is_not_held_while_the_broker_waits_for_a_job(
    beanstalk: BeanstalkServer,
) -> None:
    # A long reserve timeout: holding the report until the reserve returns would take 30 s.
    producer = beanstalk.client(use="pipe-idle")
    job_id = producer.put(b"x", ttr=30)
    seen = Timeline()
    broker = Broker(config_for(beanstalk, "cat", reserve_timeout=30), "pipe-idle", 0, seen)
    stop = threading.Event()
    thread = threading.Thread(target=broker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: seen.reports() == [job_id], 10, message="the report of the only job")
        assert thread.is_alive()  # still waiting for a next job
    finally:
        stop.set()
        broker.interrupt()
        thread.join(10)
    assert not thread.is_alive()
