"""Drills with the real ``cmdstalk`` process: signals, stubborn commands, process trees."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import Collector, config_for, read_events, run_one, start_cmdstalk


def _running(started: Path) -> int:
    """Commands that have started (each touches ``started/<job id>`` first).

    Stop only once they run: the server counts a job reserved as soon as it answers the
    reserve, and a stop that cuts the broker's reserve short before it reads that reply
    hands the job back unrun (nothing lost, but no event for it either).
    """
    return sum(1 for _ in started.iterdir())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


def _gone(pid: int) -> bool:
    """No such process any more; a zombie does not count as gone."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_DEAD
    except psutil.NoSuchProcess:
        return True


def _describe(pid: int) -> str:
    try:
        p = psutil.Process(pid)
        parent = psutil.Process(p.ppid())
        return f"{p.status()} parent={parent.pid} {parent.name()} {parent.cmdline()[:4]}"
    except psutil.NoSuchProcess:
        return "gone"


def test_command_ignoring_sigterm_is_sigkilled(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="stubborn")
    job_id = producer.put(b"", ttr=2)
    seen = Collector()
    broker = Broker(config_for(beanstalk, "trap '' TERM; sleep 30"), "stubborn", 0, seen)
    result = run_one(broker)
    assert (result.outcome, result.signal) == (Outcome.TIMEOUT_BURIED, signal.SIGKILL)
    assert seen.kills[:2] == [("stubborn", "SIGTERM"), ("stubborn", "SIGKILL")]
    assert producer.stats_job(job_id)["state"] == "buried"


@pytest.mark.slow
def test_sigterm_with_jobs_in_flight_loses_nothing(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    producer = beanstalk.client(use="drill")
    ids = {producer.put(str(i).encode(), ttr=30) for i in range(8)}
    events = tmp_path / "events.jsonl"
    started = tmp_path / "started"
    started.mkdir()
    proc = start_cmdstalk(
        f"-address={beanstalk.address}", "-tubes=drill", "-per-tube=3",
        f"-cmd=touch {started}/$CMDSTALK_JOB_ID; sleep 0.5; cat", f"--events={events}",
    )
    try:
        wait_until(lambda: _running(started) >= 3, 15, message="3 jobs in flight")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()
    finally:
        _stop(proc)
    records = read_events(events)
    finished = {r["job_id"] for r in records if r["outcome"] == "deleted"}
    # The ones in flight ran to the end, and no job ran without being deleted.
    assert finished == {int(p.name) for p in started.iterdir()} and len(finished) >= 3
    stats = producer.stats_tube("drill")
    assert stats["current-jobs-reserved"] == 0 and stats["current-jobs-buried"] == 0
    left: set[int] = set()
    while stats["current-jobs-ready"] > len(left):
        job = beanstalk.client(watch="drill").reserve(timeout=1)
        left.add(job.id)
    assert finished | left == ids and not finished & left
    assert all(r["outcome"] in ("deleted", "shutdown_released") for r in records)


@pytest.mark.slow
def test_second_sigterm_kills_and_releases(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    producer = beanstalk.client(use="drill2")
    ids = {producer.put(b"", ttr=60) for _ in range(2)}
    events = tmp_path / "events.jsonl"
    log = tmp_path / "stderr.log"
    started = tmp_path / "started"
    started.mkdir()
    cmd = f"trap '' TERM; touch {started}/$CMDSTALK_JOB_ID; sleep 60"
    with log.open("wb") as stderr:
        proc = start_cmdstalk(
            "--address", beanstalk.address, "--tubes", "drill2", "--per-tube", "2",
            "--cmd", cmd, "--events", str(events), stderr=stderr,
        )
    try:
        wait_until(lambda: _running(started) == 2, 15, message="2 jobs in flight")
        proc.send_signal(signal.SIGTERM)
        # Two signals sent at once may arrive as one: wait until the first was seen.
        wait_until(lambda: "stopping" in log.read_text(), 10, message="first SIGTERM handled")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
        assert proc.returncode == 0, log.read_text()
    finally:
        _stop(proc)
    records = read_events(events)
    assert {r["job_id"] for r in records} == ids
    assert {r["outcome"] for r in records} == {"shutdown_released"}
    assert producer.stats_tube("drill2")["current-jobs-ready"] == 2


@pytest.mark.slow
def test_descendants_are_killed_and_reaped(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    # The command leaves a grandchild in its group and one in a new session, both holding
    # stdout, and overruns its TTR: every process goes, none is left a zombie.
    producer = beanstalk.client(use="tree")
    job_id = producer.put(b"", ttr=2)
    pids = tmp_path / "pids"
    cmd = (
        f"sleep 300 & echo $! >> {pids}; "
        f"setsid sleep 301 & echo $! >> {pids}; "
        f"echo $$ >> {pids}; sleep 302"
    )
    events = tmp_path / "events.jsonl"
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--tubes", "tree", "--cmd", cmd, "--events", str(events)
    )
    try:
        wait_until(lambda: len(read_events(events)) == 1, 20, message="the job's result")
        (record,) = read_events(events)
        assert (record["job_id"], record["outcome"]) == (job_id, "timeout_buried")
        listed = [int(p) for p in pids.read_text().split()]
        assert len(listed) == 3
        seen: dict[int, str] = {}

        def all_gone() -> bool:
            for p in listed:
                if not _gone(p):
                    seen[p] = _describe(p)
            return all(_gone(p) for p in listed)

        try:
            wait_until(all_gone, 10, message="no process left")
        except AssertionError:
            raise AssertionError(f"left: {seen} of {listed}") from None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=15)
        finally:
            _stop(proc)
    assert proc.returncode == 0


@pytest.mark.slow
def test_grandchild_holding_stdout_does_not_hang_the_broker(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    producer = beanstalk.client(use="hold")
    job_id = producer.put(b"", ttr=60)
    pid_file = tmp_path / "pid"
    broker = Broker(
        config_for(beanstalk, f"sleep 300 & echo $! > {pid_file}; echo bye"), "hold", 0
    )
    result = run_one(broker)
    assert (result.job_id, result.outcome) == (job_id, Outcome.DELETED)
    assert result.duration_ms < 10_000
    assert result.stdout_tail == "bye\n"
    pid = int(pid_file.read_text())
    wait_until(lambda: _gone(pid), 10, message="the leftover grandchild is gone")


@pytest.mark.slow
def test_daemon_left_by_a_job_is_reaped_when_it_exits(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    # The job starts a daemon in a new session and exits 0; the daemon outlives it, is
    # adopted by cmdstalk (a child subreaper) and exits a second later: cmdstalk must reap
    # it, or it stays a zombie for as long as cmdstalk runs.
    producer = beanstalk.client(use="daemon")
    job_id = producer.put(b"", ttr=30)
    pid_file = tmp_path / "daemon.pid"
    cmd = (
        f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 1' </dev/null >/dev/null 2>&1 & "
        # Exit only once the daemon has left our process group (the group is cleaned up).
        f"while [ ! -s {pid_file} ]; do sleep 0.02; done"
    )
    events = tmp_path / "events.jsonl"
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--tubes", "daemon", "--cmd", cmd, "--events", str(events)
    )
    try:
        wait_until(lambda: len(read_events(events)) == 1, 20, message="the job's result")
        (record,) = read_events(events)
        assert (record["job_id"], record["outcome"]) == (job_id, "deleted")
        daemon = int(pid_file.read_text())
        try:
            wait_until(lambda: _gone(daemon), 15, message="the daemon reaped")
        except AssertionError:
            raise AssertionError(f"daemon {daemon} left: {_describe(daemon)}") from None

        def zombies() -> list[int]:
            children = psutil.Process(proc.pid).children()
            return [c.pid for c in children if c.status() == psutil.STATUS_ZOMBIE]

        assert zombies() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=15)
        finally:
            _stop(proc)
    assert proc.returncode == 0


@pytest.mark.slow
def test_ttr_kill_during_shutdown_releases(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    # Issue 4: on SIGTERM a running job may go on until its TTR deadline; killed there, it
    # is released (not buried as an overrun would be), and cmdstalk exits 0.
    producer = beanstalk.client(use="ttrstop")
    job_id = producer.put(b"", priority=42, ttr=3)
    started = tmp_path / "started"
    events = tmp_path / "events.jsonl"
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--tubes", "ttrstop", "--cmd",
        f"touch {started}; sleep 30", "--events", str(events),
    )  # fmt: skip
    try:
        # SIGTERM well before the kill at 1.5 s (TTR 3 with the default margin and grace).
        wait_until(started.exists, 20, interval=0.01, message="the job running")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()
    finally:
        _stop(proc)
    (record,) = read_events(events)
    assert (record["job_id"], record["outcome"]) == (job_id, "shutdown_released")
    # Killed at its TTR deadline (TERM at 1.5 s), not at the SIGTERM: no --shutdown-timeout.
    assert record["signal"] == "SIGTERM" and record["duration_ms"] >= 1400
    stats = producer.stats_job(job_id)
    assert stats["state"] in ("ready", "delayed")
    assert (stats["buries"], stats["timeouts"], stats["releases"]) == (0, 0, 1)
    assert (stats["pri"], stats["delay"]) == (42, 0)
