"""``clear`` and ``move`` touch only the chosen state, keep what a job is, ask first."""

from __future__ import annotations

import threading
import time

from tests.ctl.run import ctl, out
from tests.helpers import BeanstalkServer


def _fill(server: BeanstalkServer) -> None:
    """mail: 3 buried (priority 5, TTR 40), 2 ready, 1 delayed."""
    c = server.client(use="mail", watch="mail")
    for n in range(3):
        c.put(b"buried %d" % n, priority=5, ttr=40)
        c.bury(c.reserve(5), priority=5)
    c.put(b"ready")
    c.put(b"ready")
    c.put(b"delayed", delay=300)


def test_clear_takes_only_the_chosen_state(beanstalk: BeanstalkServer) -> None:
    _fill(beanstalk)
    c = beanstalk.client()
    refused = ctl(beanstalk.address, "clear", "mail", "--state", "buried")
    assert refused.returncode == 2 and b"--yes" in refused.stderr  # no terminal to ask on
    assert c.stats_tube("mail")["current-jobs-buried"] == 3
    done = ctl(beanstalk.address, "clear", "mail", "--state", "buried", "--yes")
    assert out(done) == f"{beanstalk.address}: deleted 3 buried jobs from mail\n"
    stats = c.stats_tube("mail")
    assert (stats["current-jobs-buried"], stats["current-jobs-ready"]) == (0, 2)
    assert stats["current-jobs-delayed"] == 1


def test_move_keeps_body_priority_and_ttr(beanstalk: BeanstalkServer) -> None:
    _fill(beanstalk)
    moved = ctl(beanstalk.address, "move", "mail", "retry", "--state", "buried", "--yes")
    assert moved.returncode == 0, moved.stderr
    assert "moved 3 buried jobs from mail to retry" in out(moved)
    c = beanstalk.client(watch="retry")
    bodies = []
    for _ in range(3):
        job = c.reserve(5)
        stats = c.stats_job(job)
        assert (stats["pri"], stats["ttr"]) == (5, 40)
        bodies.append(job.body)
        c.delete(job)
    assert sorted(bodies) == ["buried 0", "buried 1", "buried 2"]
    mail = c.stats_tube("mail")
    assert (mail["current-jobs-buried"], mail["current-jobs-ready"]) == (0, 2)


def test_clear_ready_while_a_producer_keeps_putting(beanstalk: BeanstalkServer) -> None:
    c = beanstalk.client(use="busy")
    for _ in range(300):
        c.put(b"old")
    stop = threading.Event()
    new_ids: list[int] = []

    def produce() -> None:
        # Once the sweep has begun: some new jobs urgent (ahead of the old ones), some not.
        p = beanstalk.client(use="busy")
        while not stop.is_set() and p.stats_tube("busy")["cmd-delete"] == 0:
            time.sleep(0.001)
        while not stop.is_set() and len(new_ids) < 500:
            new_ids.append(p.put(b"new", priority=len(new_ids) % 2 * 2**16))

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        done = ctl(beanstalk.address, "clear", "busy", "--state", "ready", "--yes")
    finally:
        stop.set()
        thread.join()
    assert done.returncode == 0, done.stderr
    deleted = int(out(done).split("deleted ")[1].split()[0])
    assert 0 < deleted <= 300
    for job_id in new_ids:  # not one job put meanwhile was touched
        assert c.stats_job(job_id)["state"] == "ready"
    assert c.stats_tube("busy")["current-jobs-ready"] == 300 - deleted + len(new_ids)
