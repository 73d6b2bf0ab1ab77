"""A Spark task's executor watch (``spark/drain._die_with_the_executor``): pyspark's daemon
SIGHUPs its workers when the executor's JVM goes, and the task must then kill its commands.
Real signals on a real process: a storm of SIGHUPs must end the task's wait, never wedge it
(a handler that set the task's Events itself deadlocked when a second SIGHUP came during
the first one's ``set()``: the task hung for good, its command a zombie, its job held)."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.helpers import wait_until

# Imports only drain's module: no Spark session (drain imports pyspark lazily).
_TASK = """
import sys, threading, time
from cmdstalk_py.spark.drain import _die_with_the_executor
stop, kill_now = threading.Event(), threading.Event()
_die_with_the_executor(stop, kill_now)
print("watching", flush=True)
while not kill_now.is_set():  # the main thread busy, as a task's loop is
    sum(range(1000))
print("killed", stop.is_set(), flush=True)
"""


def test_a_storm_of_sighups_kills_the_task_and_never_wedges_it() -> None:
    for _ in range(5):  # the old deadlock needed a signal inside another's set(): retry
        proc = subprocess.Popen([sys.executable, "-c", _TASK], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "watching"
            for _ in range(300):
                proc.send_signal(signal.SIGHUP)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        assert out.strip() == "killed True", (out, err)


def test_the_watch_ends_with_the_task() -> None:
    """Setting ``stop`` (as the task's end does) ends the watcher thread: a reused Python
    worker must not gather one more per task."""
    import threading

    from cmdstalk_py.spark.drain import WATCH_INTERVAL, _die_with_the_executor

    stop, kill_now = threading.Event(), threading.Event()
    before = {t for t in threading.enumerate() if t.name == "executor-watch"}
    previous = _die_with_the_executor(stop, kill_now)
    try:
        started = {t for t in threading.enumerate() if t.name == "executor-watch"} - before
        assert len(started) == 1
        stop.set()
        wait_until(lambda: not any(t.is_alive() for t in started), 10 + WATCH_INTERVAL,
                   message="the watcher ended")  # fmt: skip
        assert not kill_now.is_set()  # ending is not killing
    finally:
        if previous is not None:
            signal.signal(signal.SIGHUP, previous)
