"""What jobs cost, on the dashboard (issue #29): each running job's tree now (memory, CPU,
processes, from /proc at most once a second, off the loop) and each finished job's figures
(its ``JobResult``'s)."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from cmdstalk_py.ops.dashboard import start_dashboard
from cmdstalk_py.ops.dashboard.board import Board
from cmdstalk_py.ops.dashboard.live import COST_RATIO, LiveUsage
from cmdstalk_py.ops.observers import JobStart
from cmdstalk_py.process.usage import Stat, read_table
from tests.ctl.run import ctl, out
from tests.dashboard.supervised import HOG_MB, get, supervised
from tests.helpers import BeanstalkServer, wait_until

MIB = 1 << 20


def _job(jobs: list[dict[str, Any]], job_id: int) -> dict[str, Any] | None:
    return next((j for j in jobs if j["job_id"] == job_id), None)


def test_a_jobs_memory_live_then_its_figures(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    done = tmp_path / "done"
    producer = beanstalk.client(use="work")
    # --max-memory far above the job: its tree is sampled, so its peak is known at the end.
    with supervised(beanstalk, tmp_path, None, "--max-memory", "1G") as sup:
        hog = producer.put(f"hog {done}".encode(), ttr=120)

        seen: list[dict[str, Any] | None] = [None]

        def holding() -> dict[str, Any] | None:
            job = seen[0] = _job(sup.running(), hog)
            if job is None or not job["memory_bytes"] or job["memory_bytes"] < HOG_MB * MIB:
                return None
            return job

        try:
            job = wait_until(holding, timeout=30, message=f"{HOG_MB} MiB live on the job")
        except AssertionError as e:  # what the page showed last says which part failed
            raise AssertionError(f"{e}; last seen {seen[0]}") from None
        assert job is not None and job["procs"] >= 1 and isinstance(job["cpu_s"], float), job
        # cmdstalk-ctl workers shows the same figures (read again: a second later, or more).
        listed = ctl(None, "workers", "--from", sup.url, columns=200)
        assert listed.returncode == 0, listed
        row = next(line for line in out(listed).splitlines() if f" {hog} " in line)
        figures = re.search(r" (\d+) MiB +(\d+\.\d\d)s ", row)
        assert figures is not None and int(figures[1]) >= HOG_MB, row
        done.touch()
        finished = wait_until(lambda: _job(sup.state()["finished"], hog), timeout=30,
                              message="the job finished")  # fmt: skip
    assert finished is not None and finished["outcome"] == "deleted", finished
    assert finished["peak_memory_bytes"] >= HOG_MB * MIB, finished
    assert finished["cpu_s"] > 0 and finished["procs"] >= 1, finished


def test_one_scan_a_second_however_many_look() -> None:
    now = [100.0]
    live = LiveUsage(read_table, clock=lambda: now[0])
    me = [(os.getpid(), 0.0)]
    threads = [threading.Thread(target=live.of, args=(me,)) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert live.scans == 1
    (figures,) = live.of(me)
    assert figures is not None and figures.memory_bytes > 0 and figures.procs >= 1
    now[0] += 0.9
    live.of(me)
    assert live.scans == 1
    now[0] += 0.1
    live.of(me)
    assert live.scans == 2


def test_nothing_running_no_scan() -> None:
    live = LiveUsage(read_table)
    assert live.of([]) == [] and live.scans == 0


def test_an_expensive_scan_spaces_the_next() -> None:
    now = [100.0]

    def slow_read() -> dict[int, Stat]:
        now[0] += 0.5  # this host's process table takes half a second to read
        return read_table()

    live = LiveUsage(slow_read, clock=lambda: now[0])
    me = [(os.getpid(), 0.0)]
    live.of(me)
    now[0] = 100.0 + COST_RATIO * 0.5 - 0.01
    live.of(me)
    assert live.scans == 1  # at most 1/COST_RATIO of a core
    now[0] = 100.0 + COST_RATIO * 0.5
    live.of(me)
    assert live.scans == 2


def test_a_job_younger_than_the_scan_shows_nothing_yet() -> None:
    wall = [1000.0]
    live = LiveUsage(read_table, wall=lambda: wall[0])
    # Its pid in that table could be another process's: no figures until the next scan.
    assert live.of([(os.getpid(), 999.0), (os.getpid(), 1000.5)])[1] is None


def test_unreadable_proc_shows_no_figures() -> None:
    def unreadable() -> dict[int, Stat]:
        raise PermissionError("hidepid")

    assert LiveUsage(unreadable).of([(os.getpid(), 0.0)]) == [None]


def test_never_read_on_the_loop() -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, name="the-supervisors-loop", daemon=True)
    runner.start()
    readers: list[str] = []

    def read() -> dict[int, Stat]:
        readers.append(threading.current_thread().name)
        return read_table()

    board = Board()
    # This test's own process as the running job's command.
    board.job_started(JobStart("default", "work", 0, "work", 7, os.getpid(), 60, time.time() - 1,
                               60.0, "ttr"))  # fmt: skip
    dashboard = start_dashboard("127.0.0.1:0", board, lambda: [], lambda server: [], lambda: None,
                                None, lambda: [], loop=loop)  # fmt: skip
    dashboard.live = LiveUsage(read)
    try:
        status, running = get(dashboard.url + "api/running")
        assert status == 200 and running[0]["memory_bytes"] > 0, running
        assert readers and "the-supervisors-loop" not in readers
    finally:
        asyncio.run_coroutine_threadsafe(dashboard.aclose(), loop).result(timeout=10)
        dashboard.close()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=10)
        loop.close()
