"""Stalled log sinks never stall jobs (issue #16 item 1).

A real ``cmdstalk`` runs with its stderr on a pipe nobody reads (or its event log on a FIFO
nobody reads): a flood of job output fills the pipe, and from then on every write blocks.
Brokers must keep finishing jobs and TTR kills must still happen before the server's TTR.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.supervisor.conftest import start_cmdstalk

pytestmark = pytest.mark.slow

# "flood": several MB of output lines, then sleep past the TTR (only a TTR kill ends it).
# "quick": one line, exit 0.
JOB_SCRIPT = """\
read -r what
case "$what" in
  flood) yes "flood line: the quick brown fox jumps over the lazy dog" | head -c 3000000
         exec sleep 60 ;;
  *) echo "done $what" ;;
esac
"""
QUICK_JOBS = 12


class Drainer:
    """Reads a pipe on a thread once started (until then nobody reads it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = bytearray()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            self.data += chunk

    def join(self, timeout: float) -> None:
        """Wait for the end of the stream (every writer closed it)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the pipe is still open"

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@contextmanager
def stalled_stderr(*args: str, **popen: Any) -> Iterator[tuple[subprocess.Popen[bytes], Drainer]]:
    """``cmdstalk`` with its stderr on a pipe that is not read until ``Drainer.start``."""
    read_fd, write_fd = os.pipe()
    proc = None
    try:
        proc = start_cmdstalk(*args, stdout=subprocess.DEVNULL, stderr=write_fd, **popen)
        os.close(write_fd)
        write_fd = -1
        drainer = Drainer(read_fd)
        yield proc, drainer
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        if proc is not None:
            stop_process(proc, timeout=10)
        os.close(read_fd)


def _job_state(client: Any, job_id: int) -> dict[str, Any]:
    stats: dict[str, Any] = client.stats_job(job_id)
    return stats


def _put_flood_then_quick(server: BeanstalkServer, tube: str) -> tuple[Any, int]:
    client = server.client(use=tube)
    flood = client.put(b"flood", ttr=3)
    # The flood must be running (and filling the pipe) before the other jobs arrive.
    wait_until(lambda: _job_state(client, flood)["state"] == "reserved", 15, message="flood runs")
    for i in range(QUICK_JOBS):
        client.put(f"q{i}".encode(), ttr=60)
    return client, flood


def _assert_killed_on_time_and_others_finish(client: Any, flood: int) -> None:
    # Killed (TERM at 1.5 s, KILL at 2.25 s for TTR 3) and buried while still reserved:
    # the server never timed it out.
    wait_until(lambda: _job_state(client, flood)["state"] == "buried", 20, message="flood buried")
    assert _job_state(client, flood)["timeouts"] == 0
    wait_until(
        lambda: client.stats()["cmd-delete"] >= QUICK_JOBS, 30, message="quick jobs deleted"
    )


def test_unread_stderr_stalls_no_broker_and_no_ttr_kill(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    script.write_text(JOB_SCRIPT)
    args = ("--address", beanstalk.address, "--tubes", "sink", "--per-tube", "3")
    with stalled_stderr(*args, "--cmd", f"sh {script}") as (proc, stderr):
        client, flood = _put_flood_then_quick(beanstalk, "sink")
        _assert_killed_on_time_and_others_finish(client, flood)
        # Once stderr is read again, the loss is reported, and shutdown is prompt.
        stderr.start()
        proc.terminate()
        assert proc.wait(timeout=20) == 0
        stderr.join(10)
        text = stderr.text()
        assert "log lines dropped" in text
        # Lines about jobs had room that the flood of output could not take.
        assert "sent SIGTERM" in text and "timeout_buried" in text


OUTPUT_JOBS = 40
# Each job prints 4 KiB, so each record carries a full stdout tail: 16 records fill a pipe.
OUTPUT_CMD = "head -c 4096 /dev/zero | tr '\\\\0' x"


@contextmanager
def unread_fifo(path: Path) -> Iterator[int]:
    """A FIFO at ``path`` with a reader that reads nothing until the test drains it."""
    os.mkfifo(path)
    # Opened first and non-blocking, so the writer's open does not wait for a reader.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        yield fd
    finally:
        os.close(fd)


def events_to(
    events: Path, beanstalk: BeanstalkServer, tube: str, per_tube: int, cmd: str
) -> subprocess.Popen[bytes]:
    """``cmdstalk`` serving ``tube``, its event log on ``events`` (a FIFO)."""
    return start_cmdstalk(
        "--address", beanstalk.address, "--tubes", tube, "--per-tube", str(per_tube),
        "--cmd", cmd, "--events", str(events),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def records_at_stop(proc: subprocess.Popen[bytes], fifo: int) -> list[dict[str, Any]]:
    """Read the FIFO at last, stop ``proc`` (exit 0), and return the records it wrote (the
    ``#`` filler lines of ``fill_fifo`` left out; any other line must be a whole record)."""
    os.set_blocking(fifo, True)
    drainer = Drainer(fifo)
    drainer.start()
    proc.terminate()
    assert proc.wait(timeout=20) == 0
    drainer.join(10)
    return [json.loads(x) for x in drainer.text().splitlines() if x[:1] != "#"]


def test_a_stalled_event_log_stalls_no_broker(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    events = tmp_path / "events.fifo"
    with unread_fifo(events) as fifo:
        proc = events_to(events, beanstalk, "ev", 3, OUTPUT_CMD)
        try:
            client = beanstalk.client(use="ev")
            for i in range(OUTPUT_JOBS):
                client.put(f"o{i}".encode(), ttr=60)
            # Before: the first broker to block in write(2) held the event log's lock and
            # every broker stopped at its next record, about 16 records in.
            wait_until(
                lambda: client.stats()["cmd-delete"] >= OUTPUT_JOBS, 60, message="jobs deleted"
            )
            # Every record arrives once the sink moves again, each one whole.
            records = records_at_stop(proc, fifo)
            assert len(records) == OUTPUT_JOBS
            assert len({r["job_id"] for r in records}) == OUTPUT_JOBS
            assert {r["outcome"] for r in records} == {"deleted"}
        finally:
            stop_process(proc, timeout=10)


def fill_fifo(path: Path) -> None:
    """Fill the FIFO's buffer, so the next write to it blocks until it is read.

    Whole lines of 1 KiB: each write is atomic (all or nothing) and the buffer's pages hold
    a whole number of them, so it ends full and on a line boundary.
    """
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                os.write(fd, b"#" * 1023 + b"\n")
            except BlockingIOError:
                return
    finally:
        os.close(fd)


# The first job ends at once; the second (TTR 1) runs until it is killed.
REPORT_CMD = 'read -r what; [ "$what" = slow ] && exec sleep 30; exit 0'


def test_a_stalled_event_log_does_not_delay_a_ttr_kill(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.fifo"
    with unread_fifo(events) as fifo:
        fill_fifo(events)
        proc = events_to(events, beanstalk, "evk", 1, REPORT_CMD)
        try:
            client = beanstalk.client(use="evk")
            client.put(b"quick", ttr=60)
            slow = client.put(b"slow", ttr=1)
            # The quick job's report is due while the slow one runs, and it waits for the
            # stalled event log (up to 1 s). Before: that wait came before the slow
            # command's first kill check, so the kill (due at 0.5 s) came after the TTR; the
            # server took the job back (timeouts 1) and the bury failed.
            wait_until(
                lambda: client.stats_job(slow)["state"] == "buried", 30, message="slow buried"
            )
            assert client.stats_job(slow)["timeouts"] == 0
            assert client.stats_job(slow)["reserves"] == 1
            assert int(client.stats()["cmd-delete"]) == 1
            records = records_at_stop(proc, fifo)
            assert [(r["job_id"], r["outcome"]) for r in records] == [
                (slow - 1, "deleted"),
                (slow, "timeout_buried"),
            ]
        finally:
            stop_process(proc, timeout=10)
